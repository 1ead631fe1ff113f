#!/usr/bin/env python3
"""bench/compare_formats.py — one model in several forms (GGUF quantizations, a Hugging Face
bf16 folder quantized at load, an MLX-quantized folder), specula and llama.cpp, in one run.

Each round runs `specula bench --json` for every --specula configuration, then llama.cpp's own
llama-bench for every --llama GGUF, alternating, so all see the same machine state; prints a
markdown table of prefill (pp) and decode (tg) tokens/s, every configuration's ratio to the
first llama.cpp one, and each specula configuration's decode bound (weight bytes per token
over the measured read bandwidth).

usage: python3 bench/compare_formats.py --specula "LABEL=-m PATH [--quantize q4_k]" ...
           --llama "LABEL=PATH.gguf" ... --llama-bench PATH [--llama-extra="--repack 0"]
           [-p 512] [-n 128] [-t THREADS] [-r 2] [--rounds 2]
Needs a release build (./scripts/build.sh) and llama-bench (tools/build_llama_server.sh).
"""
import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.strip().startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON line in output:\n" + text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specula", action="append", default=[], help="LABEL=specula bench arguments")
    ap.add_argument("--llama", action="append", default=[], help="LABEL=GGUF for llama-bench")
    ap.add_argument("--llama-bench", default="")
    ap.add_argument("--llama-extra", default="")
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-r", "--reps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bin", default=str(ROOT / "build" / "release" / "specula"))
    a = ap.parse_args()
    runs = {}  # label -> (pp list, tg list, info)
    for rnd in range(a.rounds):
        for spec in a.specula:
            label, args = spec.split("=", 1)
            out = subprocess.run([a.bin, "bench", *shlex.split(args), "-p", str(a.n_prompt), "-n", str(a.n_gen),
                                  "-t", str(a.threads), "-r", str(a.reps), "--json"],
                                 check=True, capture_output=True, text=True).stdout
            s = last_json(out)
            r = runs.setdefault("specula " + label, ([], [], s))
            r[0].append(s.get("pp", {}).get("tokens_per_s", float("nan")))
            r[1].append(s.get("tg", {}).get("tokens_per_s", float("nan")))
            print(f"[round {rnd + 1}] specula {label}: pp {r[0][-1]:.1f} tg {r[1][-1]:.1f}", file=sys.stderr)
        for spec in a.llama:
            label, path = spec.split("=", 1)
            cmd = [a.llama_bench, "-m", path, "-t", str(a.threads), "-r", str(a.reps), "-o", "json",
                   "-p", str(a.n_prompt), "-n", str(a.n_gen)] + a.llama_extra.split()
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            r = runs.setdefault("llama.cpp " + label, ([], [], {}))
            pp = [x["avg_ts"] for x in res if x.get("n_prompt", 0) > 0 and x.get("n_gen", 0) == 0]
            tg = [x["avg_ts"] for x in res if x.get("n_gen", 0) > 0 and x.get("n_prompt", 0) == 0]
            r[0].append(pp[0] if pp else float("nan"))
            r[1].append(tg[0] if tg else float("nan"))
            print(f"[round {rnd + 1}] llama.cpp {label}: pp {r[0][-1]:.1f} tg {r[1][-1]:.1f}", file=sys.stderr)
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    first_spec = next((v[2] for k, v in runs.items() if k.startswith("specula")), {})
    print(f"machine: {platform.machine()}, {cpu}, {os.cpu_count()} cores; threads {a.threads}; "
          f"CPU features: {first_spec.get('cpu_features')}; ISA {first_spec.get('isa')}")
    print(f"rounds {a.rounds} x reps {a.reps}, alternating; llama.cpp: llama-bench {a.llama_extra}\n")
    ref = next((k for k in runs if k.startswith("llama.cpp")), None)
    m = statistics.mean
    print(f"| configuration | pp{a.n_prompt} t/s | tg{a.n_gen} t/s | pp ratio | tg ratio | decode bound |")
    print("|---|---|---|---|---|---|")
    for k, (pp, tg, info) in runs.items():
        rp = m(pp) / m(runs[ref][0]) if ref else float("nan")
        rt = m(tg) / m(runs[ref][1]) if ref else float("nan")
        bound = ""
        if info.get("bytes_per_token"):
            wb, bw = info["bytes_per_token"], info["read_bandwidth_bytes_per_s"]
            bound = f"{wb / 1e6:.0f} MB/token, {100 * m(tg) * wb / bw:.0f}% of {bw / wb:.1f} t/s"
        print(f"| {k} | {m(pp):.1f} | {m(tg):.1f} | {rp:.2f} | {rt:.2f} | {bound} |")
    if ref:
        print(f"\nratios are to {ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
