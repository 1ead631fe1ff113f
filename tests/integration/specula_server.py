"""tests/integration/specula_server.py — shared helper for the server acceptance tests.

Owns: finding the CLI, the model and the fixtures (env SPECULA_CLI, SPECULA_MODEL /
SPECULA_MODELS, SPECULA_FIXTURES_DIR, or argv from ctest), starting
`specula serve --port 0 ...` as a subprocess, reading the "serving ... on
http://HOST:PORT" line from its stderr, stopping it with SIGTERM and checking that it
exited 0 with no sanitizer report; raw HTTP requests and SSE parsing over http.client
(no third-party module), /metrics parsing, and the skip/fail conventions (exit 77 = skip,
which ctest maps through SKIP_RETURN_CODE).
Does not: build anything, or talk to the server through the openai client (the tests do).
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

SKIP = 77
_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def skip(why):
    print(f"SKIP: {why}", flush=True)
    sys.exit(SKIP)


def cli_path():
    p = os.environ.get("SPECULA_CLI")
    if not p:
        for cand in ("build/release/specula", "build/servertests/specula"):
            c = os.path.join(_REPO, cand)
            if os.path.exists(c):
                p = c
                break
    if not p or not os.path.exists(p):
        raise TestFailure(f"specula CLI not found (set SPECULA_CLI): {p}")
    return p


def model_path():
    p = os.environ.get("SPECULA_MODEL")
    if not p:
        d = os.environ.get("SPECULA_MODELS") or os.path.expanduser("~/.cache/specula/models")
        p = os.path.join(d, "gemma-3-270m-q4_k_m.gguf")
    return p


def require_model():
    p = model_path()
    if not os.path.exists(p):
        skip(f"model {p} not found (run scripts/fetch_model.sh gemma3-270m)")
    return p


def require_qwen05():
    """Qwen2.5-Coder 0.5B's GGUF beside the default model, or skip."""
    p = os.path.join(os.path.dirname(model_path()), "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    if not os.path.exists(p):
        skip(f"{p} not found (run scripts/fetch_model.sh qwen2.5-coder-0.5b)")
    return p


def fixtures_dir():
    return os.environ.get("SPECULA_FIXTURES_DIR") or os.path.join(_REPO, "tests", "fixtures")


def gemma_template():
    return os.path.join(fixtures_dir(), "chat_templates", "gemma3.jinja")


def tokenize(text, parse_special=True):
    """Token ids the server's tokenizer gives `text` (with BOS), via `specula tokenize --json`."""
    args = [cli_path(), "tokenize", "-m", model_path(), "--json"]
    if parse_special:
        args.append("--parse-special")
    args.append(text)
    out = subprocess.run(args, capture_output=True, timeout=120, check=True)
    return json.loads(out.stdout)


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "SUMMARY: UndefinedBehavior")


class Server:
    """`specula serve` on a free port. Use as a context manager; exit checks a clean stop."""

    def __init__(self, *extra, model=None, startup_timeout=180):
        # One compute thread by default: on a shared 2-core machine a spinning 2-thread pool
        # decodes ~25x slower than one thread when the cores are oversubscribed.
        threads = os.environ.get("SPECULA_TEST_THREADS", "1")
        self.args = [cli_path(), "serve", "-m", model or model_path(), "--port", "0", "-t", threads, *extra]
        self.startup_timeout = startup_timeout
        self.proc = None
        self.host = self.port = None
        self.stderr_lines = []
        self._ready = threading.Event()
        self.exit_code = None

    def _read_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            self.stderr_lines.append(line)
            m = re.search(r"serving .* on http://([^:\s]+):(\d+)", line)
            if m and not self._ready.is_set():
                self.host, self.port = m.group(1), int(m.group(2))
                self._ready.set()
        self._ready.set()  # EOF: wake a waiting start()

    def start(self):
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        self._ready.wait(self.startup_timeout)
        if self.port is None:
            self.proc.kill()
            self.proc.wait()
            raise TestFailure("server did not start: " + " ".join(self.args) + "\n" + self.stderr())
        return self

    def stderr(self):
        return "".join(self.stderr_lines)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def stop(self, timeout=120, sig=signal.SIGTERM):
        """SIGTERM (a drain: what runs finishes first; SIGINT cancels it), wait, then check
        exit status 0 and no sanitizer report."""
        if self.proc is None:
            return
        if self.proc.poll() is not None:
            code = self.proc.returncode
            self._reader.join(10)
            raise TestFailure(f"server died before stop (exit {code}):\n{self.stderr()[-4000:]}")
        self.proc.send_signal(sig)
        try:
            self.exit_code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise TestFailure(f"server did not stop within {timeout}s of {signal.Signals(sig).name}:\n{self.stderr()[-4000:]}")
        self._reader.join(30)
        err = self.stderr()
        for marker in SANITIZER_MARKERS:
            check(marker not in err, f"sanitizer report in server stderr ({marker}):\n{err[-8000:]}")
        check(self.exit_code == 0, f"server exited {self.exit_code} after {signal.Signals(sig).name}:\n{err[-4000:]}")

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.stop()
        elif self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            code = self.proc.wait()
            self._reader.join(10)
            sys.stderr.write(f"---- server (exit {code}) stderr, tail ----\n" + self.stderr()[-6000:] + "\n")
        return False

    # ---- raw HTTP ----
    def conn(self, timeout=120):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """Returns (status, headers dict (lower-case names), body bytes)."""
        c = self.conn(timeout)
        try:
            h = dict(headers or {})
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            if isinstance(body, str):
                body = body.encode("utf-8")
            if body is not None and "Content-Type" not in h:
                h["Content-Type"] = "application/json"
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def get_json(self, path, **kw):
        status, headers, data = self.request("GET", path, **kw)
        try:
            return status, headers, json.loads(data)
        except ValueError:
            raise TestFailure(f"GET {path}: status {status}, body is not JSON: {data[:300]!r}")

    def post_json(self, path, body, **kw):
        status, headers, data = self.post(path, body, **kw)
        try:
            j = json.loads(data)
        except ValueError:
            raise TestFailure(f"POST {path}: status {status}, body is not JSON: {data[:300]!r}")
        return status, headers, j

    def stream(self, path, body, timeout=120):
        """POSTs a streaming request; returns (status, headers, raw bytes, events) where events
        is the list of `data:` payloads (str), after checking the SSE framing."""
        status, headers, data = self.post(path, body, timeout=timeout)
        if status != 200:
            return status, headers, data, None
        return status, headers, data, parse_sse(data)

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        check(status == 200, f"/metrics answered {status}")
        return parse_metrics(data.decode())

    def wait_idle(self, timeout=5.0):
        """Waits until running rows and queue depth are 0; returns the metrics."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if m.get("specula_running_rows", -1) == 0 and m.get("specula_queue_depth", -1) == 0:
                return m
            if time.time() > deadline:
                raise TestFailure(f"server not idle {timeout}s after the load: running_rows="
                                  f"{m.get('specula_running_rows')} queue_depth={m.get('specula_queue_depth')}")
            time.sleep(0.1)


def parse_sse(data):
    """Checks every event is exactly `data: <payload>\\n\\n` and returns the payloads."""
    text = data.decode("utf-8")
    check(text.endswith("\n\n"), f"SSE body does not end with a blank line: {text[-100:]!r}")
    events = text[:-2].split("\n\n")
    out = []
    for ev in events:
        check(ev.startswith("data: ") and "\n" not in ev, f"bad SSE event framing: {ev[:200]!r}")
        out.append(ev[len("data: "):])
    check(out and out[-1] == "[DONE]", f"SSE stream does not end with data: [DONE]: {out[-1:]!r}")
    check("[DONE]" not in out[:-1], "data: [DONE] before the end of the stream")
    return out


def parse_metrics(text):
    """Prometheus text -> {name or name{labels}: float}."""
    m = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, val = line.rpartition(" ")
        m[key] = float(val)
    return m


def check_error_body(status, body, want_status, what, param=None):
    """An OpenAI error answer: status and {"error": {"message","type","param","code"}}."""
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except ValueError:
            raise TestFailure(f"{what}: error body is not JSON: {body[:200]!r}")
    check(status == want_status, f"{what}: status {status}, want {want_status}; body {body}")
    check(isinstance(body, dict) and isinstance(body.get("error"), dict), f"{what}: no error object: {body}")
    e = body["error"]
    for k in ("message", "type", "param", "code"):
        check(k in e, f"{what}: error body lacks '{k}': {body}")
    check(isinstance(e["message"], str) and e["message"], f"{what}: empty error message: {body}")
    check(isinstance(e["type"], str), f"{what}: error type not a string: {body}")
    check(e["param"] is None or isinstance(e["param"], str), f"{what}: param not null/string: {body}")
    check(e["code"] is None or isinstance(e["code"], (str, int)), f"{what}: code not null/string: {body}")
    if param is not None:
        check(e["param"] == param, f"{what}: param {e['param']!r}, want {param!r}")
    return e


def run_main(name, fn):
    """Runs fn(), prints a summary line, exits 0 / 1 (failure) / 77 (skip)."""
    t0 = time.time()
    try:
        summary = fn()
    except TestFailure as e:
        print(f"FAIL {name} ({time.time() - t0:.1f}s): {e}", flush=True)
        sys.exit(1)
    print(f"PASS {name} ({time.time() - t0:.1f}s){': ' + summary if summary else ''}", flush=True)
    sys.exit(0)


def read_until_close(sock, timeout=3):
    """Everything a raw socket receives until the server closes it (or `timeout` passes
    with nothing, or a reset)."""
    import socket
    sock.settimeout(timeout)
    rest = b""
    try:
        while True:
            d = sock.recv(65536)
            if not d:
                break
            rest += d
    except (socket.timeout, ConnectionResetError):
        pass
    return rest
