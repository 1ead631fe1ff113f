#!/usr/bin/env python3
"""bench/serve_bench.py — aggregate decode throughput of `specula serve` vs llama-server.

For each concurrency C (default 1, 4, 8, 16) both servers are started on the same GGUF
with C parallel slots and the same total context (specula `--parallel C --ctx C*N`,
llama-server `-np C -c C*N`: both take -c as the total of all slots), the same thread
count, and C clients each stream one /v1/completions request at once (temperature 0, `ignore_eos`, max_tokens = --n-gen, a
short distinct prompt per client). Engines alternate per round; the best round counts.

Reported per engine and C:
  aggregate tok/s = all completion tokens / wall time from the first request sent to the
                    last stream finished (prefill included, as a user sees it);
  decode tok/s    = completion tokens after each stream's first token / time from the
                    earliest first token to the last finish (steady-state batched decode).
Writes a markdown table (stdout) and, with --json, one JSON object.

Usage: bench/serve_bench.py [--model FILE] [--concurrency 1,4,8,16] [--n-gen 128]
                            [--rounds 2] [--threads N] [--llama-server PATH]
llama-server comes from tools/build_llama_server.sh (built from llama-cpp-python's sdist).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "The history of the printing press", "Write a short story about a lighthouse keeper",
    "Explain how a hash table works", "A recipe for bread:", "The rules of chess are",
    "Once upon a time in a city of glass", "Photosynthesis converts", "The best way to learn a language",
    "In 1969, the first", "Dear diary, today", "The mitochondria is", "How to train a puppy:",
    "The ocean at night", "A list of prime numbers:", "My favourite programming language is",
    "The weather forecast for tomorrow",
]


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            if r.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError("server did not become ready")


def start(engine: str, args, C: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    if engine == "specula":
        cmd = [args.specula, "serve", "-m", args.model, "--port", str(port), "--parallel", str(C),
               "--ctx", str(C * args.ctx), "--threads", str(args.threads), "--alias", "bench"]
    else:
        cmd = [args.llama_server, "-m", args.model, "--port", str(port), "-np", str(C), "-c", str(C * args.ctx),
               "-t", str(args.threads), "-tb", str(args.threads), "--alias", "bench", "--no-webui", "-cb",
               *args.llama_extra.split()]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, proc)
    return proc, port


def sse_events(r):
    """Yields the parsed JSON of each `data:` event of a streaming HTTP response (not [DONE])."""
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            return
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: ") and ev != b"data: [DONE]":
                yield json.loads(ev[6:])


def stream_one(port: int, prompt: str, n_gen: int, out: dict) -> None:
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": n_gen, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    out["sent"] = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    n = 0
    first = None
    for obj in sse_events(r):
        if obj.get("choices") and obj["choices"][0].get("text"):
            n += 1  # one token per chunk on both servers (no speculation)
            if first is None:
                first = time.perf_counter()
    out["end"] = time.perf_counter()
    out["first"] = first if first is not None else out["end"]
    out["tokens"] = n


def run_round(port: int, C: int, n_gen: int) -> dict:
    outs = [dict() for _ in range(C)]
    threads = [threading.Thread(target=stream_one, args=(port, PROMPTS[i % len(PROMPTS)], n_gen, outs[i]))
               for i in range(C)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        if "tokens" not in o:
            raise RuntimeError("a client failed")
    t_sent = min(o["sent"] for o in outs)
    t_first = min(o["first"] for o in outs)
    t_end = max(o["end"] for o in outs)
    tokens = sum(o["tokens"] for o in outs)
    after_first = sum(max(o["tokens"] - 1, 0) for o in outs)
    return {"tokens": tokens, "aggregate": tokens / (t_end - t_sent),
            "decode": after_first / max(t_end - t_first, 1e-9), "wall": t_end - t_sent}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(Path(os.environ.get("SPECULA_MODELS", Path.home() / ".cache/specula/models"))
                                           / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--concurrency", default="1,4,8,16")
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--specula", default=str(ROOT / "build/release/specula"))
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--llama-extra", default="",
                    help="extra llama-server arguments, e.g. '--no-repack' (its AMX repacking crashes on some CPUs)")
    ap.add_argument("--engines", default="specula,llama")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.llama_server is None:
        bindir = subprocess.run([str(ROOT / "tools/build_llama_server.sh"), "--print-bin-dir"], capture_output=True,
                                text=True).stdout.strip()
        args.llama_server = str(Path(bindir) / "llama-server")
    engines = args.engines.split(",")
    if "llama" in engines and not Path(args.llama_server).exists():
        print(f"llama-server not found at {args.llama_server}; run tools/build_llama_server.sh", file=sys.stderr)
        return 1
    levels = [int(x) for x in args.concurrency.split(",")]
    best: dict = {}
    for C in levels:
        for r in range(args.rounds):
            for eng in (engines if r % 2 == 0 else engines[::-1]):
                proc, port = start(eng, args, C)
                try:
                    run_round(port, C, min(8, args.n_gen))  # warm-up
                    res = run_round(port, C, args.n_gen)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
                print(f"[serve_bench] C={C} round {r} {eng}: aggregate {res['aggregate']:.1f} tok/s, "
                      f"decode {res['decode']:.1f} tok/s ({res['tokens']} tokens, {res['wall']:.1f} s)",
                      file=sys.stderr, flush=True)
                key = (eng, C)
                if key not in best or res["aggregate"] > best[key]["aggregate"]:
                    best[key] = res
    print(f"| streams | specula agg tok/s | llama-server agg tok/s | ratio | specula decode tok/s | "
          f"llama-server decode tok/s | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for C in levels:
        s, l = best.get(("specula", C)), best.get(("llama", C))
        if s and l:
            print(f"| {C} | {s['aggregate']:.1f} | {l['aggregate']:.1f} | {s['aggregate'] / l['aggregate']:.2f} | "
                  f"{s['decode']:.1f} | {l['decode']:.1f} | {s['decode'] / l['decode']:.2f} |")
        elif s:
            print(f"| {C} | {s['aggregate']:.1f} | - | - | {s['decode']:.1f} | - | - |")
    if "specula" in engines and 1 in levels and 8 in levels:
        print(f"\nspecula aggregate at 8 streams / 1 stream: "
              f"{best[('specula', 8)]['aggregate'] / best[('specula', 1)]['aggregate']:.2f}x")
    if args.json:
        print(json.dumps({f"{e}@{c}": v for (e, c), v in best.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
