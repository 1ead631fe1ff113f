#!/usr/bin/env python3
"""capture_router_requests.py — what sglang-router forwards to a worker, as fixture data.

  python3 tools/capture_router_requests.py [--out tests/fixtures/router_requests.json]

Installs sglang-router (PyPI, pinned) into a venv under build/router-venv, starts a
recording worker on a loopback port (it answers the router's health probes and records every
request it is sent), starts the router in front of it with cache-aware routing, sends a set
of client requests through the router (chat and completions, streamed or not, with sampling
fields, stop strings, tools, logprobs), and writes what reached the worker: the probes'
paths and each forwarded body. tests/integration/test_llama_server_api.py sends those
bodies to specula and expects each one to be answered. The router rewrites every body with
SGLang's own fields at their defaults (no_stop_trim, skip_special_tokens, ...), which is why
the fixture comes from the router itself and not from a list written by hand."""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROUTER_VERSION = "0.3.2"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What clients send (the OpenAI SDK's shapes): each goes through the router once.
CLIENT_REQUESTS = [
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                                         {"role": "user", "content": "Count to three."}],
                              "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "seed": 3, "stop": ["\n\n"],
                              "stream": True, "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}],
                              "max_tokens": 16, "tools": [{"type": "function", "function": {
                                  "name": "get_weather", "description": "Current weather",
                                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                 "required": ["city"]}}}], "tool_choice": "auto"}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                              "logprobs": True, "top_logprobs": 2, "n": 1, "presence_penalty": 0.1,
                              "frequency_penalty": 0.1, "response_format": {"type": "json_object"}}),
    ("/v1/completions", {"model": "m", "prompt": "Once upon a time", "max_tokens": 8}),
    ("/v1/completions", {"model": "m", "prompt": ["Once", "Twice"], "max_tokens": 4, "temperature": 0,
                         "logprobs": 2, "echo": True, "stream": True}),
    ("/v1/completions", {"model": "m", "prompt": "def f(x):", "max_tokens": 4, "stop": "x", "seed": 1,
                         "top_k": 20, "min_p": 0.05, "repeat_penalty": 1.1}),
]


class Recorder(BaseHTTPRequestHandler):
    seen = []
    lock = threading.Lock()

    def _send(self, code, obj, stream=False):
        if stream:
            body = b"data: " + json.dumps(obj).encode() + b"\n\ndata: [DONE]\n\n"
            ctype = "text/event-stream"
        else:
            body = json.dumps(obj).encode()
            ctype = "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with self.lock:
            self.seen.append({"method": "GET", "path": self.path})
        if self.path == "/health":
            return self._send(200, {})
        if self.path == "/v1/models":
            return self._send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
        self._send(404, {"error": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
        with self.lock:
            self.seen.append({"method": "POST", "path": self.path, "body": body})
        chat = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        self._send(200, chat, stream=bool(body and body.get("stream")))

    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/router_requests.json"))
    args = ap.parse_args()
    venv = os.path.join(ROOT, "build/router-venv")
    py = os.path.join(venv, "bin/python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "--quiet", f"sglang-router=={ROUTER_VERSION}"], check=True)
    wport, rport, mport = free_port(), free_port(), free_port()
    worker = ThreadingHTTPServer(("127.0.0.1", wport), Recorder)
    threading.Thread(target=worker.serve_forever, daemon=True).start()
    router = subprocess.Popen([py, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(rport),
                               "--worker-urls", f"http://127.0.0.1:{wport}", "--policy", "cache_aware",
                               "--prometheus-port", str(mport), "--log-level", "warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{rport}/health", timeout=2).read()
                break
            except Exception:
                if time.time() > deadline:
                    sys.exit("the router did not come up")
                time.sleep(0.5)
        for path, body in CLIENT_REQUESTS:
            req = urllib.request.Request(f"http://127.0.0.1:{rport}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=30).read()
            except urllib.error.HTTPError as e:
                sys.exit(f"the router refused {path} {json.dumps(body)[:200]}: {e.code} {e.read()[:300]!r}")
    finally:
        router.terminate()
        router.wait(timeout=30)
        worker.shutdown()
    probes = sorted({s["path"] for s in Recorder.seen if s["method"] == "GET"})
    forwarded = [{"path": s["path"], "body": s["body"]} for s in Recorder.seen if s["method"] == "POST"]
    if len(forwarded) != len(CLIENT_REQUESTS):
        sys.exit(f"{len(forwarded)} requests reached the worker, {len(CLIENT_REQUESTS)} sent")
    with open(args.out, "w") as f:
        json.dump({"router": f"sglang-router {ROUTER_VERSION} --policy cache_aware", "probes": probes,
                   "forwarded": forwarded}, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {len(probes)} probe paths, {len(forwarded)} forwarded requests")


if __name__ == "__main__":
    main()
