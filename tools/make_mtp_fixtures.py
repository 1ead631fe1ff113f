#!/usr/bin/env python3
"""tools/make_mtp_fixtures.py — tiny random-weight Qwen3.5 (`qwen35`) GGUF files with a
multi-token-prediction block, and llama.cpp's MTP drafts on them as the oracle of specula's
`--spec mtp` (decoding/mtp.h, tests/decoding/mtp_test.cpp).

The trunks are tools/make_qwen35_fixtures.py's shapes with other seeds; the MTP block
(blk.L.nextn.*, as llama.cpp's converter writes Qwen3.5's) comes after them:

  mtp_a  tiny_a's shape (n_embd 64, 4 layers, tied output, f32); the block uses the model's
         embedding, output_norm and output; its eh_proj leans to copying the input token
         (copy_gain), its layers add little, and the trunk's embedding is large enough that
         greedy decoding often repeats a token: drafts get accepted, fully and partly.
  mtp_b  tiny_b's shape (n_embd 96, 6 layers, recurrent_layers list, f16, output.weight);
         a random block with its own embed_tokens, shared_head_head and shared_head_norm
         (drafts are rarely accepted: every round checks the drafts at a new length).

Usage:
  python3 tools/make_mtp_fixtures.py --models-only --out DIR [--check]
      writes DIR/qwen35_mtp_a.gguf, DIR/qwen35_mtp_b.gguf and DIR/qwen35_nomtp.gguf (mtp_a
      without its block) — numpy + gguf only; the tests run this at test time; --check
      fails unless they are the files the fixture was made from (sha256);
  python3 tools/make_mtp_fixtures.py
      also builds tools/llama_spec_oracle.cpp against llama.cpp (tools/build_llama_server.sh's
      build of the llama-cpp-python 0.3.36 sdist; about 20 minutes the first time) and runs it
      on each model and prompt: greedy, --spec-type draft-mtp, --spec-draft-n-max DEPTH,
      --spec-draft-n-min 0, --spec-draft-p-min 0, f16 KV cache; writes tests/fixtures/mtp_reference.json:
      per model its sha256 and depth, per prompt the prompt ids, llama.cpp's greedy tokens and
      every draft it made (the context length n it continued, the draft, how many the target
      accepted).
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

import make_qwen35_fixtures as mq
from llama_oracle import check_models, run_spec_oracle, sha256, spec_oracle_binary, write_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "fixtures", "mtp_reference.json")
DEPTH = 3
N_GEN = 40
PROMPT_LENGTHS = [5, 12, 23]

SHAPES = {
    "mtp_a": dict(mq.SHAPES["tiny_a"], seed=3601, embd_scale=0.5,
                  mtp=dict(copy_gain=3.0, layer_gain=0.3)),
    "mtp_b": dict(mq.SHAPES["tiny_b"], seed=3602, mtp=dict(own_embed=True, own_head=True, head_norm=True)),
    "nomtp": dict(mq.SHAPES["tiny_a"], seed=3601, embd_scale=0.5),
}


def prompts(name: str) -> list[list[int]]:
    rng = np.random.default_rng(SHAPES[name]["seed"] + 1000)
    V = SHAPES[name]["n_vocab"]
    return [[int(x) for x in rng.integers(2, V, n)] for n in PROMPT_LENGTHS]


def oracle(binary: str, name: str, path: str) -> dict:
    cases = []
    for p in prompts(name):
        cases.append(run_spec_oracle(binary, p, N_GEN, DEPTH, ["-m", path, "--spec-type", "draft-mtp"]))
    return {"sha256": sha256(path), "depth": DEPTH, "cases": cases}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-only", action="store_true", help="write the GGUF files only")
    ap.add_argument("--out", help="folder for the GGUF files (default: a temporary folder)")
    ap.add_argument("--check", action="store_true", help="with --models-only: compare with the fixture's sha256")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="specula_mtp_")
    os.makedirs(out, exist_ok=True)
    paths = {}
    for name, shape in SHAPES.items():
        paths[name] = os.path.join(out, f"qwen35_{name}.gguf")
        write_atomic(paths[name], lambda tmp, n=name, s=shape: mq.write_model(n, tmp, s))
    if args.models_only:
        return check_models({n: p for n, p in paths.items() if n != "nomtp"}, FIXTURE, args.check)
    binary = spec_oracle_binary()
    ref = {"format": "mtp_reference v1: per model the GGUF's sha256 (tools/make_mtp_fixtures.py regenerates it) "
                     "and the draft depth; per prompt: prompt ids, llama.cpp's greedy tokens, and every draft "
                     "(n: the context length it continued, pending token included; draft; accepted).",
           "oracle": "llama.cpp (llama-cpp-python 0.3.36 sdist) common_speculative draft-mtp via "
                     "tools/llama_spec_oracle.cpp, greedy, f16 KV cache, CPU",
           "models": {n: oracle(binary, n, p) for n, p in paths.items() if n != "nomtp"}}
    for n, m in ref["models"].items():
        drafted = sum(len(d["draft"]) for c in m["cases"] for d in c["drafts"])
        accepted = sum(d["accepted"] for c in m["cases"] for d in c["drafts"])
        print(f"{n}: {drafted} drafted, {accepted} accepted")
    with open(FIXTURE, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
