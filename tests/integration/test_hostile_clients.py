"""tests/integration/test_hostile_clients.py — `specula serve`'s connection layer against
clients that are slow, odd or many (raw sockets on loopback, bounded in time):
- pipelining: several requests in one write are all answered, in order;
- half-close: a client that shuts down its sending side after its request (GET, malformed
  request line, non-streamed and streamed completions) still gets its whole answer;
- deadlines: connections that trickle their headers one byte every 0.5 s, stall inside
  their headers or inside their body are dropped by --timeout-header / --timeout-body
  (408, or a plain close when nothing came), while 32 normal clients stream; their
  throughput is compared with the same 32 clients alone (same server, same run);
- many idle connections: 1,000 open idle connections do not stop normal requests;
- the cap: connections beyond --max-connections get a 503 JSON error at once, and the
  server serves again when they go.
Does not: test request parsing errors (test_raw_http.py) or disconnect cancellation
(test_disconnect.py).
Exit 0 pass, 1 fail, 77 skip (no model).
"""

import json
import os
import resource
import selectors
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

C = "/v1/completions"


def raw_request(method, path, body=None, version="1.1", extra=b""):
    head = f"{method} {path} HTTP/{version}\r\nHost: x\r\n".encode() + extra
    if body is not None:
        data = json.dumps(body).encode()
        head += b"Content-Type: application/json\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data
    else:
        head += b"\r\n"
    return head


class Reader:
    """Reads HTTP/1.1 responses (Content-Length or chunked bodies) off one socket,
    skipping interim 1xx responses."""

    def __init__(self, sock):
        self.s = sock
        self.buf = b""

    def _fill(self):
        d = self.s.recv(65536)
        check(d, f"the server closed the connection mid-response: {self.buf[:200]!r}")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def response(self):
        while True:
            while b"\r\n\r\n" not in self.buf:
                self._fill()
            head, _, self.buf = self.buf.partition(b"\r\n\r\n")
            status = int(head.split(b" ")[1])
            if 100 <= status < 200:
                continue
            break
        headers = {}
        for ln in head.split(b"\r\n")[1:]:
            k, _, v = ln.partition(b":")
            headers[k.strip().lower().decode()] = v.strip().decode()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                n = int(self._line(), 16)
                while len(self.buf) < n + 2:
                    self._fill()
                body += self.buf[:n]
                self.buf = self.buf[n + 2:]
                if n == 0:
                    break
        else:
            n = int(headers.get("content-length", "0"))
            while len(self.buf) < n:
                self._fill()
            body, self.buf = self.buf[:n], self.buf[n:]
        return status, headers, body


def test_pipelining(srv, stats):
    s = socket.create_connection((srv.host, srv.port), timeout=30)
    try:
        reqs = [raw_request("GET", "/health"),
                raw_request("POST", C, {"prompt": "One, two,", "max_tokens": 3, "temperature": 0}),
                raw_request("GET", "/nope"),
                raw_request("POST", C, {"prompt": "Red, green,", "max_tokens": 3, "temperature": 0, "stream": True}),
                raw_request("GET", "/v1/models")]
        s.sendall(b"".join(reqs))
        r = Reader(s)
        got = [r.response() for _ in reqs]
    finally:
        s.close()
    check([g[0] for g in got] == [200, 200, 404, 200, 200], f"pipelined statuses {[g[0] for g in got]}")
    check(got[0][2] == b'{"status":"ok"}', f"pipelined /health body {got[0][2]!r}")
    check(json.loads(got[1][2])["object"] == "text_completion", f"pipelined completion {got[1][2][:200]!r}")
    check(b"no route" in got[2][2], f"pipelined 404 body {got[2][2]!r}")
    check(ss.parse_sse(got[3][2])[-1] == "[DONE]", f"pipelined stream {got[3][2][-200:]!r}")
    check(json.loads(got[4][2])["object"] == "list", f"pipelined models {got[4][2][:200]!r}")
    # The same texts one at a time: pipelining changes nothing.
    st, _, data = srv.post(C, {"prompt": "One, two,", "max_tokens": 3, "temperature": 0})
    check(json.loads(data)["choices"][0]["text"] == json.loads(got[1][2])["choices"][0]["text"],
          "a pipelined completion differs from the same request alone")
    stats["pipelined"] = len(reqs)


def half_closed(srv, data):
    s = socket.create_connection((srv.host, srv.port), timeout=30)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        r = Reader(s)
        st, headers, body = r.response()
        # Then the server closes.
        rest = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            rest += d
        return st, headers, body, rest
    finally:
        s.close()


def test_half_close(srv, stats):
    st, _, body, _ = half_closed(srv, raw_request("GET", "/health"))
    check(st == 200 and body == b'{"status":"ok"}', f"half-closed GET: {st} {body!r}")
    st, _, body, _ = half_closed(srv, b"THIS IS NOT HTTP\r\n\r\n")
    check(st == 400 and b"error" in body, f"half-closed malformed request line: {st} {body!r}")
    st, _, body, _ = half_closed(srv, b"GET / HTTP/1.1\r\nHost: x\r\n")  # ends inside the headers
    check(st == 400, f"half-closed incomplete request: {st} {body!r}")
    req = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    st, _, body, _ = half_closed(srv, raw_request("POST", C, req))
    check(st == 200, f"half-closed completion: {st} {body[:200]!r}")
    half_text = json.loads(body)["choices"][0]["text"]
    st, _, data = srv.post(C, req)
    check(json.loads(data)["choices"][0]["text"] == half_text, "a half-closed client got a different completion")
    st, _, body, _ = half_closed(srv, raw_request("POST", C, dict(req, stream=True)))
    events = ss.parse_sse(body)
    check(st == 200 and events[-1] == "[DONE]", f"half-closed stream: {st} {body[-200:]!r}")
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"])
    check(text == half_text, f"half-closed stream text {text!r} != {half_text!r}")
    stats["half_close"] = 5


class Hostile:
    """Many hostile connections on one selector thread: 'trickle' sends a request's
    headers one byte every 0.5 s, 'stall_head' half a request line then nothing,
    'stall_body' whole headers announcing 100 bytes and 10 of them. Records when each
    was closed by the server and what it was told."""

    def __init__(self, host, port, kinds):
        self.sel = selectors.DefaultSelector()
        self.conns = []
        t0 = time.time()
        for kind in kinds:
            s = socket.create_connection((host, port), timeout=5)
            s.setblocking(False)
            c = {"kind": kind, "sock": s, "t0": t0, "closed_at": None, "data": b"", "pos": 0}
            if kind == "trickle":
                c["payload"] = raw_request("POST", C, {"prompt": "x" * 200, "max_tokens": 1})
            elif kind == "stall_head":
                s.send(b"GET /heal")
            elif kind == "trickle_body":  # declares 100 kB, sends a byte every 0.5 s
                s.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
                c["payload"] = b"x" * 100000
            else:
                s.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
            self.sel.register(s, selectors.EVENT_READ, c)
            self.conns.append(c)
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        next_tick = time.time()
        while not self.stop:
            for key, _ in self.sel.select(timeout=0.05):
                c = key.data
                try:
                    d = c["sock"].recv(65536)
                except OSError:
                    d = b""
                if d:
                    c["data"] += d
                else:
                    c["closed_at"] = time.time()
                    self.sel.unregister(c["sock"])
                    c["sock"].close()
            if time.time() >= next_tick:
                next_tick += 0.5
                for c in self.conns:
                    if c["kind"] in ("trickle", "trickle_body") and c["closed_at"] is None and c["pos"] < len(c["payload"]):
                        try:
                            c["sock"].send(c["payload"][c["pos"]:c["pos"] + 1])
                            c["pos"] += 1
                        except OSError:
                            pass

    def finish(self):
        self.stop = True
        self.thread.join(5)
        for c in self.conns:
            if c["closed_at"] is None:
                c["sock"].close()


def stream_clients(srv, n, max_tokens):
    """n concurrent streamed completions; returns (tokens, seconds, errors)."""
    out = [None] * n

    def one(i):
        try:
            st, _, raw, events = srv.stream(C, {"prompt": f"Count to {i}:", "max_tokens": max_tokens,
                                                "ignore_eos": True, "temperature": 0, "stream": True,
                                                "stream_options": {"include_usage": True}}, timeout=120)
            out[i] = json.loads(events[-2])["usage"]["completion_tokens"] if st == 200 else f"status {st}"
        except Exception as e:  # noqa: BLE001
            out[i] = repr(e)

    t0 = time.time()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    dt = time.time() - t0
    errors = [o for o in out if not isinstance(o, int)]
    return sum(o for o in out if isinstance(o, int)), dt, errors


def test_deadlines(srv, stats, header_s, body_s):
    base_tok, base_dt, errs = stream_clients(srv, 32, 24)
    check(not errs, f"baseline streams failed: {errs[:3]}")
    h = Hostile(srv.host, srv.port, ["trickle"] * 12 + ["stall_head"] * 12 + ["stall_body"] * 12 + ["trickle_body"] * 12)
    tok, dt, errs = stream_clients(srv, 32, 24)
    check(not errs, f"streams beside hostile connections failed: {errs[:3]}")
    deadline = time.time() + max(header_s, body_s) + 10
    while time.time() < deadline and any(c["closed_at"] is None for c in h.conns):
        time.sleep(0.1)
    h.finish()
    for c in h.conns:
        check(c["closed_at"] is not None, f"a {c['kind']} connection was never dropped")
        took = c["closed_at"] - c["t0"]
        limit = (header_s if c["kind"] in ("trickle", "stall_head") else body_s + header_s) + 3
        check(took <= limit, f"a {c['kind']} connection was dropped after {took:.1f} s (limit {limit:.1f} s)")
        check(b" 408 " in c["data"][:20], f"a {c['kind']} connection got {c['data'][:100]!r}, not 408")
    ratio = (tok / dt) / (base_tok / base_dt)
    # 2 cores are shared with the Python clients: allow noise, catch starvation.
    check(ratio >= 0.7, f"32 streams beside 48 hostile connections ran at {ratio:.2f}x their speed alone")
    m = srv.metrics()
    check(m.get('specula_http_connections_total{event="timed_out"}', 0) >= 48, "timed-out connections not counted")
    drops = sorted(c["closed_at"] - c["t0"] for c in h.conns)
    stats["deadlines"] = (f"48 hostile connections dropped in {drops[0]:.1f}-{drops[-1]:.1f} s; 32 streams "
                          f"{tok / dt:.0f} tok/s beside them vs {base_tok / base_dt:.0f} alone ({ratio:.2f}x)")


def expect_refused(srv, data, status, want, what):
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    try:
        t0 = time.time()
        s.sendall(data)
        st, headers, body = Reader(s).response()
        dt = time.time() - t0
        check(st == status and want in body, f"{what}: {st} {body[:200]!r}")
        check(headers.get("connection") == "close", f"{what}: the connection must close ({headers})")
        check(dt < 2, f"{what}: answered after {dt:.1f} s")
        rest = ss.read_until_close(s)
        check(b"HTTP/1.1" not in rest, f"{what}: what followed was parsed as a request: {rest[:200]!r}")
    finally:
        s.close()


def test_framing(srv, stats):
    """Ambiguous framing is refused and the connection closed (no request smuggling); chunk
    framing that never ends hits the buffer limit instead of growing memory."""
    smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    body = json.dumps({"prompt": "hi", "max_tokens": 1}).encode()
    cl = b"Content-Length: " + str(len(body)).encode() + b"\r\n"
    cases = [
        (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n" + smuggled,
         400, b"Transfer-Encoding", "Transfer-Encoding: identity"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n" + cl + b"\r\n" + body + smuggled,
         400, b"Transfer-Encoding", "Transfer-Encoding: gzip with Content-Length"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + cl + b"\r\n" + body + smuggled,
         400, b'"error"', "chunked with Content-Length"),
        (b"POST /v1/completions HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n0\r\n\r\n"
         + smuggled, 400, b"Transfer-Encoding", "HTTP/1.0 chunked"),
        (b"GET /health HTTP/1.1\r\n\r\n" + smuggled, 400, b"Host", "no Host"),
        (b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" + smuggled, 400, b"Host", "two Hosts"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;" + b"a" * 200000,
         431, b"larger than", "endless chunk extension"),
    ]
    for data, status, want, what in cases:
        expect_refused(srv, data, status, want, what)
    # A well-formed chunked body is read.
    s = socket.create_connection((srv.host, srv.port), timeout=30)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                  hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n")
        st, _, out = Reader(s).response()
        check(st == 200, f"chunked request body: {st} {out[:200]!r}")
    finally:
        s.close()
    stats["framing"] = len(cases) + 1


def test_fin_after_bytes(srv, stats):
    """A client that sends more bytes after its request and then closes is still noticed
    (its FIN counts even with unread bytes before it): the row is freed in about a step."""
    m0 = srv.metrics()
    c0 = m0.get('specula_requests_total{outcome="cancelled"}', 0)
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    s.sendall(raw_request("POST", C, {"prompt": "Story:", "max_tokens": 240, "ignore_eos": True}))
    time.sleep(0.4)
    s.sendall(raw_request("GET", "/health"))
    s.close()
    t0 = time.time()
    while time.time() - t0 < 10:
        m = srv.metrics()
        if m.get('specula_requests_total{outcome="cancelled"}', 0) > c0 and m.get("specula_running_rows", 1) == 0:
            break
        time.sleep(0.05)
    dt = time.time() - t0
    check(dt < 3, f"a client gone after sending extra bytes was noticed after {dt:.1f} s")
    stats["fin_after_bytes"] = f"freed in {dt:.2f} s"


def raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(n, soft)), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_idle_thousand(stats):
    if raise_nofile(1200) < 1100:
        ss.skip("cannot open 1,100 descriptors here")
    with ss.Server("--parallel", "2", "--ctx", "256") as srv:
        idle = [socket.create_connection((srv.host, srv.port), timeout=5) for _ in range(1000)]
        try:
            t0 = time.time()
            for i in range(4):
                st, _, data = srv.post(C, {"prompt": f"Item {i}:", "max_tokens": 4, "temperature": 0})
                check(st == 200, f"request {i} beside 1,000 idle connections: {st} {data[:200]!r}")
            dt = time.time() - t0
            m = srv.metrics()
            check(m.get("specula_http_connections_open", 0) >= 1000,
                  f"open connections {m.get('specula_http_connections_open')}")
        finally:
            for s in idle:
                s.close()
    stats["idle"] = f"4 requests beside 1,000 idle connections in {dt:.2f} s"


def test_cap(stats):
    with ss.Server("--parallel", "1", "--ctx", "256", "--max-connections", "32") as srv:
        held = [socket.create_connection((srv.host, srv.port), timeout=5) for _ in range(32)]
        time.sleep(0.3)
        try:
            s = socket.create_connection((srv.host, srv.port), timeout=5)
            t0 = time.time()
            s.sendall(raw_request("GET", "/health"))
            st, headers, body = Reader(s).response()
            dt = time.time() - t0
            s.close()
            check(st == 503 and headers.get("connection") == "close", f"over the cap: {st} {headers}")
            e = json.loads(body)["error"]
            check("too many connections" in e["message"], f"503 body {body!r}")
            check(dt < 1, f"the 503 took {dt:.2f} s")
        finally:
            for h in held:
                h.close()
        deadline = time.time() + 5
        while True:
            try:
                st, _, _ = srv.request("GET", "/health", timeout=5)
            except OSError:
                st = None
            if st == 200 or time.time() > deadline:
                break
            time.sleep(0.1)
        check(st == 200, f"after the held connections closed: {st}")
        m = srv.metrics()
        check(m.get('specula_http_connections_total{event="refused_over_cap"}', 0) >= 1, "503 at the cap not counted")
    stats["cap"] = f"503 at --max-connections 32 in {dt * 1e3:.0f} ms"


def main():
    ss.require_model()
    stats = {}
    header_s, body_s = 2.0, 2.0
    with ss.Server("--parallel", "32", "--ctx", "256", "--timeout-header", str(header_s),
                   "--timeout-body", str(body_s)) as srv:
        test_pipelining(srv, stats)
        test_half_close(srv, stats)
        test_framing(srv, stats)
        test_fin_after_bytes(srv, stats)
        test_deadlines(srv, stats, header_s, body_s)
        check(srv.alive(), "server died")
    test_idle_thousand(stats)
    test_cap(stats)
    return "; ".join(f"{k}: {v}" for k, v in stats.items())


if __name__ == "__main__":
    ss.run_main("test_hostile_clients", main)
