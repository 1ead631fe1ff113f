#!/usr/bin/env python3
"""bench/kv_capacity.py — how many long requests `specula serve` holds at once in one KV
budget, per cache type.

Starts `specula serve --parallel 8 --kv-budget B` once per cache type (default f16, q8_0,
q4_0 and turbo4.5/turbo3) and sends 8 streaming /v1/completions requests at once, each a long prompt (token
ids, --prompt tokens) plus --n-gen tokens (ignore_eos). Admission reserves each request's
prompt + max_tokens in state bytes and queues the rest, so the number of requests running
together is what the budget holds. /metrics is polled every 50 ms: the table reports the
most rows running at once, the peak state bytes held, the budget, and the wall time for all
8 requests. The budget B is the same for every type: what --budget-requests (default 3)
f16 requests reserve, measured first from /metrics (specula_kv_reserved_bytes) while one
such request runs with an ample budget.

Usage: bench/kv_capacity.py [--model FILE] [--types f16,q8_0,q4_0] [--prompt 2000] [--n-gen 32]
                            [--budget-requests 3] [--threads N]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from serve_bench import free_port, wait_ready  # noqa: E402


def metrics(port: int) -> dict[str, float]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([-+0-9.e]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def request(port: int, prompt: list[int], n_gen: int, done: list) -> None:
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": n_gen, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    done.append(r.status)


def run(args, ctype: str, budget: int, n_requests: int = 8) -> dict:
    port = free_port()
    cmd = [args.specula, "serve", "-m", args.model, "--port", str(port), "--parallel", "8", "--ctx",
           str(args.prompt + args.n_gen + 64), "--kv-budget", str(budget), "-ctk", ctype.split("/")[0],
           "-ctv", ctype.split("/")[-1],
           "--threads", str(args.threads), "--alias", "bench", "--queue", "16"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(port, proc)
        rng = random.Random(1)
        prompts = [[2] + [rng.randrange(1000, 30000) for _ in range(args.prompt - 1)] for _ in range(n_requests)]
        done: list = []
        threads = [threading.Thread(target=request, args=(port, p, args.n_gen, done)) for p in prompts]
        t0 = time.time()
        for t in threads:
            t.start()
        peak_rows, peak_bytes, peak_reserved = 0.0, 0.0, 0.0
        while any(t.is_alive() for t in threads):
            m = metrics(port)
            peak_rows = max(peak_rows, m.get("specula_running_rows", 0))
            peak_bytes = max(peak_bytes, m.get("specula_kv_bytes", 0))
            peak_reserved = max(peak_reserved, m.get("specula_kv_reserved_bytes", 0))
            time.sleep(0.05)
        wall = time.time() - t0
        for t in threads:
            t.join()
        assert done == [200] * n_requests, done
        return {"type": ctype, "peak_rows": int(peak_rows), "peak_kv_bytes": int(peak_bytes), "budget": budget,
                "peak_reserved": int(peak_reserved), "wall_s": wall}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    models = os.environ.get("SPECULA_MODELS", os.path.expanduser("~/.cache/specula/models"))
    ap.add_argument("--model", default=os.path.join(models, "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--types", default="f16,q8_0,q4_0,turbo4.5/turbo3", help="cache types, k/v for a pair")
    ap.add_argument("--prompt", type=int, default=2000)
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--budget-requests", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--specula", default=str(ROOT / "build" / "release" / "specula"))
    args = ap.parse_args()
    per_request = run(args, "f16", 1 << 40, n_requests=1)["peak_reserved"]
    budget = int(per_request * args.budget_requests)
    rows = [run(args, t, budget) for t in args.types.split(",")]
    print(f"model {Path(args.model).name}, 8 requests of {args.prompt} + {args.n_gen} tokens, "
          f"KV budget {budget / 2**20:.1f} MiB = {args.budget_requests:g} f16 requests of "
          f"{per_request / 2**20:.1f} MiB reserved each, {args.threads} threads")
    print("| KV type | requests running at once (peak) | peak KV bytes held | wall time for all 8 |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['type']} | {r['peak_rows']} | {r['peak_kv_bytes'] / 2**20:.1f} MiB | {r['wall_s']:.1f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
