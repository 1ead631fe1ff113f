#!/usr/bin/env python3
"""bench/compare_llamacpp.py — specula vs llama.cpp, same model, machine, threads and run.

Runs `specula bench --json` and tools/bench_llamacpp.py (llama.cpp through
llama-cpp-python, llama-bench style) alternately for --rounds rounds, so both see the
same machine state, and prints a markdown table of prefill (pp) and decode (tg)
tokens/s with the specula/llama.cpp ratios, plus the decode memory-bandwidth bound.

usage: python3 bench/compare_llamacpp.py [-m MODEL] [-p 512] [-n 128] [-t THREADS] [--rounds 2]
           [--isa avx512,avx2] [--llama-bench PATH [--llama-extra=--repack=0]]
           [--ik-llama-bench PATH [--ik-extra="-rtr 1"]]
--isa runs specula once per kernel tier (SPECULA_ISA) in every round; --llama-bench times
llama.cpp with its own native llama-bench binary (tools/build_llama_server.sh builds it)
instead of llama-cpp-python; --llama-extra passes arguments on to it (on AMX machines
llama.cpp's repacking crashes: --llama-extra="--repack 0"). --ik-llama-bench adds
ik_llama.cpp's llama-bench (tools/build_ik_llama.sh) as a third engine in every round,
with --ik-extra (default "-rtr 1", its run-time repacking).
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


def run_llama_bench(binary: str, a, extra: str) -> dict:
    """One llama-bench run (llama.cpp's or ik_llama.cpp's; same CLI and JSON): mean pp and tg tokens/s."""
    cmd = [binary, "-m", a.model, "-t", str(a.threads), "-r", str(a.reps), "-o", "json",
           "-p", str(a.n_prompt), "-n", str(a.n_gen)] + extra.split()
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    l = {"pp_tps_mean": float("nan"), "tg_tps_mean": float("nan")}
    for r in res:
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            l["pp_tps_mean"] = r["avg_ts"]
        elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            l["tg_tps_mean"] = r["avg_ts"]
    return l


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
    ap.add_argument("--isa", default="", help="comma-separated SPECULA_ISA tiers to run (default: detected)")
    ap.add_argument("--llama-bench", default="", help="path of llama-bench (default: llama-cpp-python)")
    ap.add_argument("--llama-extra", default="", help="extra llama-bench arguments, one string")
    ap.add_argument("--ik-llama-bench", default="", help="path of ik_llama.cpp's llama-bench (tools/build_ik_llama.sh)")
    ap.add_argument("--ik-extra", default="-rtr 1", help="extra ik_llama.cpp llama-bench arguments (default: -rtr 1)")
    a = ap.parse_args()
    tiers = [t for t in a.isa.split(",") if t] or [""]

    sp = {t: ([], []) for t in tiers}  # tier -> (pp list, tg list)
    ll_pp, ll_tg = [], []
    ik_pp, ik_tg = [], []
    extra = {}
    isa_of = {}
    for rnd in range(a.rounds):
        for t in tiers:
            env = dict(os.environ)
            if t:
                env["SPECULA_ISA"] = t
            out = subprocess.run([a.specula, "bench", "-m", a.model, "-p", str(a.n_prompt), "-n", str(a.n_gen),
                                  "-t", str(a.threads), "-r", str(a.reps), "--json"],
                                 check=True, capture_output=True, text=True, env=env).stdout
            s = last_json(out)
            sp[t][0].append(s["pp"]["tokens_per_s"] if "pp" in s else float("nan"))
            sp[t][1].append(s["tg"]["tokens_per_s"] if "tg" in s else float("nan"))
            if t == tiers[0]:
                extra = s  # the decode bound of the first tier listed (packing changes the bytes read)
            isa_of[t] = s.get("isa")
        if a.llama_bench:
            l = run_llama_bench(a.llama_bench, a, a.llama_extra)
        else:
            out = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_llamacpp.py"), "-m", a.model,
                                  "-p", str(a.n_prompt), "-n", str(a.n_gen), "-t", str(a.threads), "-r", str(a.reps)],
                                 check=True, capture_output=True, text=True).stdout
            l = last_json(out)
        ll_pp.append(l["pp_tps_mean"])
        ll_tg.append(l["tg_tps_mean"])
        ik_note = ""
        if a.ik_llama_bench:
            k = run_llama_bench(a.ik_llama_bench, a, a.ik_extra)
            ik_pp.append(k["pp_tps_mean"])
            ik_tg.append(k["tg_tps_mean"])
            ik_note = f" | ik_llama.cpp pp {ik_pp[-1]:.1f} tg {ik_tg[-1]:.1f}"
        print(f"[compare] round {rnd + 1}: " + " | ".join(
            f"specula {isa_of[t]} pp {sp[t][0][-1]:.1f} tg {sp[t][1][-1]:.1f}" for t in tiers) +
            f" | llama.cpp pp {ll_pp[-1]:.1f} tg {ll_tg[-1]:.1f}" + ik_note, file=sys.stderr)

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
    print(f"machine: {platform.machine()}, {cpu}, {os.cpu_count()} cores; threads {a.threads}; "
          f"CPU features: {extra.get('cpu_features')}")
    print(f"model: {os.path.basename(a.model)}; rounds {a.rounds} x reps {a.reps} each, alternating engines; "
          f"llama.cpp: {'llama-bench ' + a.llama_extra if a.llama_bench else 'llama-cpp-python'}\n")
    ik = bool(a.ik_llama_bench)
    print("| test | " + " | ".join(f"specula {isa_of[t]} tokens/s" for t in tiers) + " | llama.cpp tokens/s | " +
          (f"ik_llama.cpp {a.ik_extra} tokens/s | " if ik else "") +
          " | ".join(f"ratio {isa_of[t]}" for t in tiers) + " | " +
          (" | ".join(f"ratio ik {isa_of[t]}" for t in tiers) + " |" if ik else ""))
    print("|---|" + "---|" * ((3 if ik else 2) * len(tiers) + 1 + ik))
    for name, idx, ll, kk in ((f"pp{a.n_prompt}", 0, ll_pp, ik_pp), (f"tg{a.n_gen}", 1, ll_tg, ik_tg)):
        if (a.n_prompt if idx == 0 else a.n_gen) == 0:
            continue
        print(f"| {name} | " + " | ".join(f"{m(sp[t][idx]):.1f}" for t in tiers) + f" | {m(ll):.1f} | " +
              (f"{m(kk):.1f} | " if ik else "") +
              " | ".join(f"{m(sp[t][idx]) / m(ll):.2f}" for t in tiers) + " |" +
              (" " + " | ".join(f"{m(sp[t][idx]) / m(kk):.2f}" for t in tiers) + " |" if ik else ""))
    if "bytes_per_token" in extra:
        wb, bw = extra["bytes_per_token"], extra["read_bandwidth_bytes_per_s"]
        print(f"\ndecode bound: {wb / 1e6:.1f} MB of weights per token, measured read bandwidth "
              f"{bw / 1e9:.2f} GB/s ({a.threads} threads) -> at most {bw / wb:.1f} tokens/s; "
              f"specula ({isa_of[tiers[0]]}) reaches {100 * m(sp[tiers[0]][1]) * wb / bw:.0f}%, "
              f"llama.cpp {100 * m(ll_tg) * wb / bw:.0f}%" +
              (f", ik_llama.cpp {100 * m(ik_tg) * wb / bw:.0f}% (of specula's packed bytes)" if ik else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
