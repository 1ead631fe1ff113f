#!/usr/bin/env python3
"""bench/library_bench.py — the libraries against the server on the same work: N concurrent
generations (default 8) of max_tokens each, greedy, with distinct prompts, (a) from N Python
threads on one specula.Engine, (b) from N concurrent generations on one JS Model under Node
(bench/library_bench.mjs; --no-js to skip), (c) from N HTTP clients against `specula serve`
with the same engine options; the three alternate within each round. Prints each one's
aggregate generated tokens per second, the ratios to the server's, and checks every text
equals the server's.

  python3 bench/library_bench.py [--model PATH] [-n 8] [--tokens 128] [--rounds 3]

Needs the built tree (build/release: libspecula.so, the specula command); runs the package
from python/ against that library.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("SPECULA_LIBRARY", os.path.join(ROOT, "build", "release", "libspecula.so"))
sys.path.insert(0, os.path.join(ROOT, "python"))
from specula import Engine, system_info  # noqa: E402

PROMPTS = ["The history of the Roman Empire", "def quicksort(arr):", "A recipe for bread:", "Dear diary, today",
           "The theory of relativity says", "import os\nimport sys\n", "Once upon a time", "Top ten facts about cats:",
           "SELECT name FROM", "The weather in London is", "In the year 2050,", "class Stack:",
           "My favourite book is", "Q: What is the speed of light?\nA:", "The best way to learn", "#include <stdio.h>\n"]


def concurrently(fn, n):
    """fn(0..n-1) on n threads at once: ([results], seconds from the first start to the last end)."""
    out = [None] * n

    def one(i):
        out[i] = fn(i)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out, time.perf_counter() - t0


def run_threads(engine, prompts, tokens):
    out, dt = concurrently(lambda i: engine.generate(prompts[i], max_tokens=tokens, temperature=0, ignore_eos=True),
                           len(prompts))
    return sum(c.completion_tokens for c in out) / dt, [c.text for c in out]


def run_http(port, prompts, tokens):
    def one(i):
        body = json.dumps({"prompt": prompts[i], "max_tokens": tokens, "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    out, dt = concurrently(one, len(prompts))
    return sum(o["usage"]["completion_tokens"] for o in out) / dt, [o["choices"][0]["text"] for o in out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/specula/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--no-js", action="store_true")
    a = ap.parse_args()
    prompts = PROMPTS[:a.n]
    ctx = a.n * 1024
    server = subprocess.Popen([os.path.join(ROOT, "build", "release", "specula"), "serve", "-m", a.model, "--port", "0",
                               "--parallel", str(a.n), "-c", str(ctx), "-t", str(a.threads), "--cache-ram", "0",
                               "--log-requests", "0"], stderr=subprocess.PIPE, text=True)
    port = None
    while port is None:
        line = server.stderr.readline()
        if not line:
            sys.exit("the server did not start")
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else None
    engine = Engine(a.model, n_parallel=a.n, n_ctx=ctx, n_threads=a.threads, cache_ram_mib=0)
    js = None
    if not a.no_js:
        js = subprocess.Popen(["node", os.path.join(ROOT, "bench", "library_bench.mjs"), a.model, str(a.n), str(a.tokens),
                               str(a.rounds), str(a.threads), json.dumps(PROMPTS)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert js.stdout.readline().strip() == "ready"
    print(f"machine: {system_info()}, {os.cpu_count()} cores; model {os.path.basename(a.model)}; "
          f"{a.n} concurrent x {a.tokens} tokens, greedy", flush=True)
    rates = {"python": [], "js": [], "server": []}
    for r in range(a.rounds):
        pr, pt = run_threads(engine, prompts, a.tokens)
        hr, ht = run_http(port, prompts, a.tokens)
        assert pt == ht, "the Python library's texts differ from the server's"
        rates["python"].append(pr)
        rates["server"].append(hr)
        line = f"round {r + 1}: python {pr:.1f} tok/s, server {hr:.1f} tok/s"
        if js is not None:
            js.stdin.write("go\n")
            js.stdin.flush()
            got = json.loads(js.stdout.readline())
            assert got["texts"] == ht, "the JS library's texts differ from the server's"
            rates["js"].append(got["rate"])
            line += f", js {got['rate']:.1f} tok/s"
        print(line, flush=True)
    med = {k: sorted(v)[len(v) // 2] for k, v in rates.items() if v}
    print("median: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in med.items()) +
          f"; python/server {med['python'] / med['server']:.3f}" +
          (f", js/server {med['js'] / med['server']:.3f}" if "js" in med else "") + "; texts equal in every round")
    engine.close()
    if js is not None:
        js.stdin.close()
        js.wait(60)
    server.terminate()
    server.wait(30)


if __name__ == "__main__":
    main()
