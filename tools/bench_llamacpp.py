#!/usr/bin/env python3
"""tools/bench_llamacpp.py — llama.cpp prefill and decode speed, llama-bench style.

Owns: timing llama.cpp through llama-cpp-python's low-level C API on one model:
  pp: one llama_decode of an N-token prompt batch (logits for the last token only),
      on an empty cache;
  tg: N single-token llama_decode calls from an empty cache.
Random token ids (first one BOS), one untimed warm-up of each, then --reps timed
runs; prints one JSON line with tokens/s mean and sample standard deviation, and
the 1-minute load average before the run (measure on an otherwise idle machine).
Does NOT: sample, tokenize text, or compare with specula (docs/BENCHMARKS.md does).

Usage: python3 tools/bench_llamacpp.py [-m MODEL] [-p 512] [-n 128] [-r 3] [-t THREADS]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import llama_cpp as lc


# Kept at module level: the C library holds this pointer for the process lifetime.
_QUIET_LOG = lc.llama_log_callback(lambda level, text, user_data: None)


def default_model() -> Path:
    env = os.environ.get("SPECULA_MODELS")
    base = Path(env) if env else Path.home() / ".cache" / "specula" / "models"
    return base / "gemma-3-270m-q4_k_m.gguf"


def fill(batch, tokens: list[int], first_pos: int, logits_last_only: bool) -> None:
    for i, tok in enumerate(tokens):
        batch.token[i] = tok
        batch.pos[i] = first_pos + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1 if (not logits_last_only or i == len(tokens) - 1) else 0
    batch.n_tokens = len(tokens)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", type=Path, default=default_model())
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    if not args.model.exists():
        print(f"[bench_llamacpp] model not found: {args.model}", file=sys.stderr)
        return 1

    lc.llama_log_set(_QUIET_LOG, ctypes.c_void_p())
    lc.llama_backend_init()
    mparams = lc.llama_model_default_params()
    model = lc.llama_model_load_from_file(str(args.model).encode(), mparams)
    if not model:
        print(f"[bench_llamacpp] failed to load {args.model}", file=sys.stderr)
        return 1
    cparams = lc.llama_context_default_params()
    cparams.n_ctx = args.n_prompt + args.n_gen + 16
    cparams.n_batch = max(args.n_prompt, 1)
    cparams.n_ubatch = max(args.n_prompt, 1)
    cparams.n_threads = args.threads
    cparams.n_threads_batch = args.threads
    cparams.no_perf = True
    ctx = lc.llama_init_from_model(model, cparams)
    if not ctx:
        print("[bench_llamacpp] failed to create context", file=sys.stderr)
        return 1
    vocab = lc.llama_model_get_vocab(model)
    n_vocab = lc.llama_vocab_n_tokens(vocab)
    bos = lc.llama_vocab_bos(vocab)
    mem = lc.llama_get_memory(ctx)
    rng = random.Random(args.seed)
    batch = lc.llama_batch_init(max(args.n_prompt, 1), 0, 1)

    def decode() -> None:
        rc = lc.llama_decode(ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def run_pp() -> float:
        tokens = [bos] + [rng.randrange(n_vocab) for _ in range(args.n_prompt - 1)]
        lc.llama_memory_clear(mem, True)
        fill(batch, tokens, 0, logits_last_only=True)
        t0 = time.perf_counter()
        decode()
        lc.llama_synchronize(ctx)
        return args.n_prompt / (time.perf_counter() - t0)

    def run_tg() -> float:
        lc.llama_memory_clear(mem, True)
        tok = bos
        t0 = time.perf_counter()
        for i in range(args.n_gen):
            fill(batch, [tok], i, logits_last_only=True)
            decode()
            lc.llama_synchronize(ctx)
            tok = rng.randrange(n_vocab)
        return args.n_gen / (time.perf_counter() - t0)

    result = {"engine": "llama.cpp", "llama_cpp_python": lc.__version__, "model": args.model.name,
              "threads": args.threads, "n_prompt": args.n_prompt, "n_gen": args.n_gen,
              "reps": args.reps, "machine": platform.machine(), "cpus": os.cpu_count(),
              "loadavg_1m_before": round(os.getloadavg()[0], 2)}
    if result["loadavg_1m_before"] > 0.5:
        print(f"[bench_llamacpp] warning: load average {result['loadavg_1m_before']} before the run; "
              "other processes will skew the numbers (llama.cpp's threads spin at barriers)",
              file=sys.stderr)
    try:
        for key, fn, n in (("pp", run_pp, args.n_prompt), ("tg", run_tg, args.n_gen)):
            if n <= 0:
                continue
            fn()  # warm-up
            samples = [fn() for _ in range(args.reps)]
            result[f"{key}_tps_mean"] = round(statistics.fmean(samples), 2)
            result[f"{key}_tps_sd"] = round(statistics.stdev(samples), 2) if len(samples) > 1 else 0.0
            result[f"{key}_tps_samples"] = [round(s, 2) for s in samples]
    finally:
        lc.llama_batch_free(batch)
        lc.llama_free(ctx)
        lc.llama_model_free(model)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
