#!/usr/bin/env python3
"""bench/library_bench.py — the Python library against the server on the same work: N
concurrent generations (default 8) of max_tokens each, greedy, with distinct prompts,
(a) from N Python threads on one specula.Engine, (b) from N HTTP clients against
`specula serve` with the same engine options; rounds alternate. Prints aggregate generated
tokens per second of each and their ratio, and checks the texts are equal.

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


def run_threads(engine, prompts, tokens):
    out = [None] * len(prompts)

    def one(i):
        out[i] = engine.generate(prompts[i], max_tokens=tokens, temperature=0, ignore_eos=True)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    return sum(c.completion_tokens for c in out) / dt, [c.text for c in out]


def run_http(port, prompts, tokens):
    out = [None] * len(prompts)

    def one(i):
        body = json.dumps({"prompt": prompts[i], "max_tokens": tokens, "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            out[i] = json.loads(r.read())

    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    return sum(o["usage"]["completion_tokens"] for o in out) / dt, [o["choices"][0]["text"] for o in out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/specula/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=0)
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
    print(f"machine: {system_info()}, {os.cpu_count()} cores; model {os.path.basename(a.model)}; "
          f"{a.n} concurrent x {a.tokens} tokens, greedy")
    lib_rates, http_rates = [], []
    for r in range(a.rounds):
        lr, lt = run_threads(engine, prompts, a.tokens)
        hr, ht = run_http(port, prompts, a.tokens)
        assert lt == ht, "the library's texts differ from the server's"
        lib_rates.append(lr)
        http_rates.append(hr)
        print(f"round {r + 1}: library {lr:.1f} tok/s, server {hr:.1f} tok/s, ratio {lr / hr:.3f}")
    lib, http = sorted(lib_rates)[len(lib_rates) // 2], sorted(http_rates)[len(http_rates) // 2]
    print(f"median: library {lib:.1f} tok/s, server {http:.1f} tok/s, library/server {lib / http:.3f}; "
          "texts equal in every round")
    engine.close()
    server.terminate()
    server.wait(30)


if __name__ == "__main__":
    main()
