#!/usr/bin/env python3
"""bench/compare_llamacpp.py — specula vs llama.cpp, same model, machine, threads and run.

Runs `specula bench --json` and tools/bench_llamacpp.py (llama.cpp through
llama-cpp-python, llama-bench style) alternately for --rounds rounds, so both see the
same machine state, and prints a markdown table of prefill (pp) and decode (tg)
tokens/s with the specula/llama.cpp ratios, plus the decode memory-bandwidth bound.

usage: python3 bench/compare_llamacpp.py [-m MODEL] [-p 512] [-n 128] [-t THREADS] [--rounds 2]
Needs: a release build (./scripts/build.sh) and the oracle (tools/install_reference.sh).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in output:\n" + text)


def main() -> int:
    ap = argparse.ArgumentParser()
    models = os.environ.get("SPECULA_MODELS", os.path.expanduser("~/.cache/specula/models"))
    ap.add_argument("-m", "--model", default=os.path.join(models, "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--specula", default=str(ROOT / "build" / "release" / "specula"))
    a = ap.parse_args()

    sp_pp, sp_tg, ll_pp, ll_tg = [], [], [], []
    extra = {}
    for rnd in range(a.rounds):
        out = subprocess.run([a.specula, "bench", "-m", a.model, "-p", str(a.n_prompt), "-n", str(a.n_gen),
                              "-t", str(a.threads), "-r", str(a.reps), "--json"],
                             check=True, capture_output=True, text=True).stdout
        s = last_json(out)
        sp_pp.append(s["pp"]["tokens_per_s"])
        sp_tg.append(s["tg"]["tokens_per_s"])
        extra = s
        out = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_llamacpp.py"), "-m", a.model,
                              "-p", str(a.n_prompt), "-n", str(a.n_gen), "-t", str(a.threads), "-r", str(a.reps)],
                             check=True, capture_output=True, text=True).stdout
        l = last_json(out)
        ll_pp.append(l["pp_tps_mean"])
        ll_tg.append(l["tg_tps_mean"])
        print(f"[compare] round {rnd + 1}: specula pp {sp_pp[-1]:.1f} tg {sp_tg[-1]:.1f} | "
              f"llama.cpp pp {ll_pp[-1]:.1f} tg {ll_tg[-1]:.1f}", file=sys.stderr)

    def m(v):
        return statistics.mean(v)

    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    print(f"machine: {platform.machine()}, {cpu}, {os.cpu_count()} cores; threads {a.threads}; ISA {extra.get('isa')}")
    print(f"model: {os.path.basename(a.model)}; rounds {a.rounds} x reps {a.reps} each, alternating engines\n")
    print("| test | specula tokens/s | llama.cpp tokens/s | ratio |")
    print("|---|---|---|---|")
    print(f"| pp{a.n_prompt} | {m(sp_pp):.1f} | {m(ll_pp):.1f} | {m(sp_pp) / m(ll_pp):.2f} |")
    print(f"| tg{a.n_gen} | {m(sp_tg):.1f} | {m(ll_tg):.1f} | {m(sp_tg) / m(ll_tg):.2f} |")
    if "bytes_per_token" in extra:
        wb, bw = extra["bytes_per_token"], extra["read_bandwidth_bytes_per_s"]
        print(f"\ndecode bound: {wb / 1e6:.1f} MB of weights per token, measured read bandwidth "
              f"{bw / 1e9:.2f} GB/s ({a.threads} threads) -> at most {bw / wb:.1f} tokens/s; "
              f"specula reaches {100 * m(sp_tg) * wb / bw:.0f}%, llama.cpp {100 * m(ll_tg) * wb / bw:.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
