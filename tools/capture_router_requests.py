#!/usr/bin/env python3
"""capture_router_requests.py — what sglang-router and vllm-router send a worker, as fixture data.

  python3 tools/capture_router_requests.py [--out tests/fixtures/router_requests.json]

Installs sglang-router and vllm-router (PyPI, pinned) into venvs under build/, starts two
recording workers on loopback ports (they answer the routers' health probes and record every
request they are sent), and for each router and policy (cache_aware, power_of_two) starts
the router in front of them, sends a set of client requests through it (chat and
completions, streamed or not, with sampling fields, stop strings, tools, logprobs; SGLang's
/generate through sglang-router), and writes what reached the workers: the probes' paths,
each forwarded body, and vllm-router's calls to vLLM's /render routes.
tests/integration/test_llama_server_api.py sends all of it to specula and expects each to be
answered. The routers rewrite every body with SGLang's own fields at their defaults
(no_stop_trim, skip_special_tokens, ...), which is why the fixture comes from the routers
themselves and not from a list written by hand."""
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
VLLM_ROUTER_VERSION = "0.1.17"
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

# SGLang's native route, as its clients send it (sglang-router forwards it).
SGLANG_REQUESTS = [
    ("/generate", {"text": "Once upon a time", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}),
    ("/generate", {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4, "temperature": 0.7,
                                                                          "top_p": 0.9, "top_k": 20, "stop": ["."]},
                   "stream": True}),
    ("/generate", {"input_ids": [2, 818, 5279], "sampling_params": {"max_new_tokens": 4}, "return_logprob": True,
                   "top_logprobs_num": 2}),
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


def install(venv, package):
    py = os.path.join(venv, "bin/python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "--quiet", package], check=True)
    return py


def capture(name, command, rport, requests):
    """Starts `command` (a router in front of the recording worker), waits for it, sends
    `requests` through it and returns what reached the worker."""
    Recorder.seen = []
    router = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{rport}/health", timeout=2).read()
                break
            except Exception:
                if time.time() > deadline:
                    sys.exit(f"{name} did not come up")
                time.sleep(0.5)
        time.sleep(2)  # a load monitor's first poll
        for path, body in requests:
            req = urllib.request.Request(f"http://127.0.0.1:{rport}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=30).read()
            except urllib.error.HTTPError as e:
                sys.exit(f"{name} refused {path} {json.dumps(body)[:200]}: {e.code} {e.read()[:300]!r}")
    finally:
        router.terminate()
        router.wait(timeout=30)
    probes = sorted({s["path"] for s in Recorder.seen if s["method"] == "GET"})
    # vllm-router asks the worker to tokenize each prompt first (vLLM's /render routes).
    posts = [{"path": s["path"], "body": s["body"]} for s in Recorder.seen if s["method"] == "POST"]
    render = [p for p in posts if p["path"].endswith("/render")]
    forwarded = [p for p in posts if not p["path"].endswith("/render")]
    if len(forwarded) != len(requests):
        sys.exit(f"{name}: {len(forwarded)} requests reached the worker, {len(requests)} sent")
    return {"router": name, "probes": probes, "forwarded": forwarded, "render": render}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/router_requests.json"))
    args = ap.parse_args()
    sglang = install(os.path.join(ROOT, "build/router-venv"), f"sglang-router=={ROUTER_VERSION}")
    vllm = install(os.path.join(ROOT, "build/vllm-router-venv"), f"vllm-router=={VLLM_ROUTER_VERSION}")
    vllm_bin = os.path.join(os.path.dirname(vllm), "vllm-router")
    # Two recording workers (power-of-two wants two to choose from).
    workers = [ThreadingHTTPServer(("127.0.0.1", free_port()), Recorder) for _ in range(2)]
    for w in workers:
        threading.Thread(target=w.serve_forever, daemon=True).start()
    urls = [f"http://127.0.0.1:{w.server_address[1]}" for w in workers]
    runs = []
    try:
        for policy in ("cache_aware", "power_of_two"):
            rport, mport = free_port(), free_port()
            runs.append(capture(f"sglang-router {ROUTER_VERSION} --policy {policy}",
                                [sglang, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(rport),
                                 "--worker-urls", *urls, "--policy", policy, "--prometheus-port", str(mport),
                                 "--log-level", "warn"], rport, CLIENT_REQUESTS + SGLANG_REQUESTS))
        for policy in ("cache_aware", "power_of_two"):
            rport, mport = free_port(), free_port()
            runs.append(capture(f"vllm-router {VLLM_ROUTER_VERSION} --policy {policy}",
                                [vllm_bin, "--host", "127.0.0.1", "--port", str(rport), "--worker-urls", *urls,
                                 "--policy", policy, "--prometheus-port", str(mport), "--log-level", "warning"],
                                rport, CLIENT_REQUESTS))
    finally:
        for w in workers:
            w.shutdown()
    with open(args.out, "w") as f:
        json.dump({"runs": runs}, f, indent=1)
        f.write("\n")
    for r in runs:
        print(f"{r['router']}: probes {r['probes']}, {len(r['forwarded'])} forwarded requests, "
              f"{len(r['render'])} render calls")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
