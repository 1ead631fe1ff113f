#!/usr/bin/env python3
"""bench/kld_compare.py — KV cache quantization quality, specula vs llama.cpp, same text.

For each model and KV cache type, the KL divergence of the next-token distributions with
that cache against the same engine with an f16 cache, over chunks of --ctx tokens of a
text (the second half of each chunk scored), as llama.cpp's llama-perplexity measures it:
  llama.cpp: llama-perplexity -fa on -ctk f16 -ctv f16 --kl-divergence-base BASE, then
             llama-perplexity -fa on -ctk T -ctv T --kl-divergence-base BASE --kl-divergence
  specula:   specula kld -ctk T -ctv T (both runs in one process)
llama.cpp has no TurboQuant types: those rows have specula only.
The default text is the GNU GPL v3 shipped with Debian (/usr/share/common-licenses/GPL-3).
Prints a markdown table (mean KLD ± standard error, same top-1 %, KV bytes per token);
--json writes the raw numbers.

Usage: bench/kld_compare.py [--models gemma,qwen15] [--types q8_0,q4_0,turbo4/turbo3]
                            [--ctx 512] [--chunks 8] [--threads N] [--json FILE]
llama-perplexity comes from tools/build_llama_server.sh.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS_DIR = os.environ.get("SPECULA_MODELS", os.path.expanduser("~/.cache/specula/models"))
MODELS = {"gemma": "gemma-3-270m-q4_k_m.gguf", "qwen15": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
          "qwen05": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"}
LLAMA_TYPES = {"f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "bf16", "f32"}


def bin_dir() -> str:
    return subprocess.check_output([os.path.join(ROOT, "tools", "build_llama_server.sh"), "--print-bin-dir"],
                                    text=True).strip()


def specula_kld(args, model: str, k: str, v: str, delay: int) -> dict:
    cmd = [args.specula, "kld", "-m", model, "-f", args.text, "-c", str(args.ctx), "--chunks", str(args.chunks),
           "-t", str(args.threads), "-ctk", k, "-ctv", v, "--json"]
    if delay:
        cmd += ["--kv-delay", str(delay)]
    out = subprocess.check_output(cmd, text=True)
    return json.loads(out.strip().splitlines()[-1])


def llama_kld(args, model: str, k: str, v: str, base: str) -> dict:
    exe = os.path.join(bin_dir(), "llama-perplexity")
    # --no-repack: on CPUs with AMX, llama.cpp 0.3.36's native build crashes in its AMX
    # matmul (SIGSEGV in ggml_backend_amx_mul_mat) unless the repacked weight buffers are
    # off; the KV cache numerics under test do not depend on it.
    common = [exe, "-m", model, "-f", args.text, "-c", str(args.ctx), "--chunks", str(args.chunks), "-t",
              str(args.threads), "-fa", "on", "-b", str(args.ctx), "--no-repack"]
    if not os.path.exists(base):
        subprocess.run(common + ["-ctk", "f16", "-ctv", "f16", "--kl-divergence-base", base], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = subprocess.run(common + ["-ctk", k, "-ctv", v, "--kl-divergence-base", base, "--kl-divergence"],
                       check=True, capture_output=True, text=True)
    text = r.stdout + r.stderr
    m = re.search(r"Mean\s+KLD:\s+([-\d.e]+)\s+±\s+([-\d.e]+)", text)
    t = re.search(r"Same top p:\s+([\d.]+)", text)
    if not m:
        raise RuntimeError("no KLD in llama-perplexity output:\n" + text[-2000:])
    return {"mean_kld": float(m.group(1)), "mean_kld_se": float(m.group(2)),
            "same_top": float(t.group(1)) / 100.0 if t else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gemma,qwen15")
    ap.add_argument("--types", default="q8_0,q4_0,turbo5/turbo3,turbo4.5/turbo3,turbo4,turbo4/turbo3,q8_0/turbo3,q4_0@64",
                    help="K/V types, K/V pairs as k/v, a delay as @N")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--specula", default=os.path.join(ROOT, "build", "release", "specula"))
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mk in args.models.split(","):
            model = os.path.join(MODELS_DIR, MODELS.get(mk, mk))
            base = os.path.join(tmp, f"{mk}.kld")
            for spec in args.types.split(","):
                delay = 0
                if "@" in spec:
                    spec, d = spec.split("@")
                    delay = int(d)
                k, v = (spec.split("/") + [spec])[:2]
                s = specula_kld(args, model, k, v, delay)
                ll = llama_kld(args, model, k, v, base) if (k in LLAMA_TYPES and v in LLAMA_TYPES and not delay) else None
                rows.append({"model": mk, "k": k, "v": v, "delay": delay, "specula": s, "llama": ll})
                print(f"{mk} {k}/{v}{'@'+str(delay) if delay else ''}: specula {s['mean_kld']:.6f}"
                      + (f", llama.cpp {ll['mean_kld']:.6f}" if ll else ""), file=sys.stderr, flush=True)
    print("| model | K/V cache | bits/value (K, V) | specula mean KLD | specula same top-1 | llama.cpp mean KLD | "
          "llama.cpp same top-1 | KV bytes/token (f16) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, ll = r["specula"], r["llama"]
        name = f"{r['k']}/{r['v']}" + (f" delay {r['delay']}" if r["delay"] else "")
        bits = 16.0 * s["kv_bytes_per_token"] / s["kv_bytes_per_token_f16"]
        print(f"| {r['model']} | {name} | {bits:.2f} avg | {s['mean_kld']:.6f} ± {s['mean_kld_se']:.6f} | "
              f"{100 * s['same_top']:.2f}% | "
              + (f"{ll['mean_kld']:.6f} ± {ll['mean_kld_se']:.6f} | {100 * ll['same_top']:.2f}% | " if ll else "— | — | ")
              + f"{s['kv_bytes_per_token']:.0f} ({s['kv_bytes_per_token_f16']:.0f}) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
