#!/usr/bin/env python3
"""tools/bench_lora.py — decode speed with LoRA adapters, specula against llama.cpp, through each
engine's own server (`specula serve`, llama.cpp's llama-server: both answer llama-server's
POST /completion with its timings).

Cases, each on the base model and with adapters (rank 16 on the seven attention and MLP
projections of every layer):
  one stream:  one request decoding -n tokens (ignore_eos): timings.predicted_per_second;
  8 streams:   8 such requests at once: all generated tokens over the wall time from the
               first request sent to the last answer (prefill of the short prompts included);
               with adapters, llama-server runs all 8 with the one adapter it was started with
               (its global --lora); specula runs them over 4 adapters, two rows each (requests
               name their adapter), and also all 8 with one adapter. llama-server's per-request
               "lora" with 4 different adapters is measured too: it does not batch requests whose
               adapters differ (server-context.cpp: a batch holds one LoRA configuration).
Engines alternate case by case (noise here is large: trust ratios of the same run).
llama.cpp runs with --no-repack (its repacking crashes on AMX CPUs; see docs/BENCHMARKS.md).

Usage: python3 tools/bench_lora.py [-m MODEL] [--adapter A.gguf ...] [-n 128] [-r 3] [-t 2]
  (adapters: the first --adapter, or four random ones written by make_lora_fixtures.py)
Prints a markdown table and one JSON line.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HOME = os.path.expanduser("~/.cache/specula")
PROMPT = "Write a long story about a ship and its crew."


class Server:
    def __init__(self, args, pattern):
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = None
        deadline = time.time() + 300
        log = []
        while time.time() < deadline:
            line = self.proc.stderr.readline().decode("utf-8", "replace")
            if not line:
                break
            log.append(line)
            m = re.search(pattern, line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise SystemExit("server did not start: " + " ".join(args) + "\n" + "".join(log[-30:]))
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        # llama-server prints its address before the model is ready: wait for /health.
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit("server never became healthy")

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()

    def post(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            raise SystemExit(f"POST {path}: {r.status} {data[:300]!r}")
        return json.loads(data)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def completion(srv, n, extra):
    return srv.post("/completion", {"prompt": PROMPT, "n_predict": n, "temperature": 0, "ignore_eos": True,
                                    "cache_prompt": False, **extra})


def one_stream(srv, n, reps, extra):
    completion(srv, 8, extra)  # warm-up
    return statistics.median(completion(srv, n, extra)["timings"]["predicted_per_second"] for _ in range(reps))


def streams(srv, n, reps, extras):
    completion(srv, 8, extras[0])
    rates = []
    for _ in range(reps):
        done = [0] * len(extras)

        def run(i):
            done[i] = completion(srv, n, extras[i])["timings"]["predicted_n"]
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(extras))]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rates.append(sum(done) / (time.time() - t0))
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=os.path.join(HOME, "models", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--adapter", action="append", default=[])
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--specula", default=os.path.join(REPO, "build", "release", "specula"))
    ap.add_argument("--llama-server", default=os.path.join(HOME, "llama.cpp", "0.3.36", "build", "bin", "llama-server"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="specula_bench_lora_")
    adapters = list(args.adapter)
    for seed in range(len(adapters), 4):
        path = os.path.join(tmp, f"random{seed}.gguf")
        subprocess.run([sys.executable, os.path.join(HERE, "make_lora_fixtures.py"), "--adapter-for", args.model,
                        "--out", path, "--rank", "16", "--seed", str(100 + seed), "--targets", "all"], check=True)
        adapters.append(path)
    t = str(args.threads)
    ctx = str(8 * (args.n + 64))
    specula = lambda *extra: Server([args.specula, "serve", "-m", args.model, "--port", "0", "-t", t, "--parallel", "8",
                                     "--ctx", ctx, "--log-requests", "0", *extra], r"on http://[^:]+:(\d+)")
    port = [18600]

    def llama(*extra):
        port[0] += 1
        return Server([args.llama_server, "-m", args.model, "--port", str(port[0]), "-t", t, "-np", "8", "-c", ctx,
                       "--no-repack", "--no-webui", *extra], r"listening on http://[^:]+:(\d+)")
    named = [f"a{i}={p}" for i, p in enumerate(adapters)]
    rows = []
    results = {}

    def record(case, engine, value):
        results.setdefault(case, {})[engine] = value
        print(f"{case:48s} {engine:9s} {value:8.2f} tokens/s", flush=True)

    for case in ("base 1", "lora 1", "base 8", "lora 8 one", "lora 8 four"):
        for engine in ("specula", "llama.cpp"):
            if engine == "specula":
                srv = specula(*(sum((["--lora", x] for x in named), []) if case != "base 1" and case != "base 8" else []))
                pick = lambda i: {"model": f"a{i % 4 if case == 'lora 8 four' else 0}"} if case.startswith("lora") else {}
            else:
                if case.startswith("lora"):
                    srv = llama("--lora", ",".join(adapters), "--lora-init-without-apply")
                    pick = lambda i: {"lora": [{"id": i % 4 if case == "lora 8 four" else 0, "scale": 1.0}]}
                else:
                    srv = llama()
                    pick = lambda i: {}
            try:
                if case.endswith(" 1"):
                    record(case, engine, one_stream(srv, args.n, args.reps, pick(0)))
                else:
                    record(case, engine, streams(srv, args.n, args.reps, [pick(i) for i in range(8)]))
            finally:
                srv.stop()
    r = results
    print()
    print("| case | specula tokens/s | llama.cpp tokens/s | specula / llama.cpp |")
    print("|---|---|---|---|")
    for case, v in r.items():
        print(f"| {case} | {v['specula']:.2f} | {v['llama.cpp']:.2f} | {v['specula'] / v['llama.cpp']:.2f} |")
    print()
    for eng in ("specula", "llama.cpp"):
        print(f"{eng}: one stream with the adapter {r['lora 1'][eng] / r['base 1'][eng]:.2f} of the base; "
              f"8 streams over one adapter {r['lora 8 one'][eng] / r['base 8'][eng]:.2f}, over four "
              f"{r['lora 8 four'][eng] / r['base 8'][eng]:.2f} of 8 base streams")
    print(json.dumps({"model": args.model, "adapters": adapters, "n": args.n, "threads": args.threads, "results": r}))


if __name__ == "__main__":
    main()
