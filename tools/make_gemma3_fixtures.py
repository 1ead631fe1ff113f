#!/usr/bin/env python3
"""tools/make_gemma3_fixtures.py — llama.cpp reference data for the Gemma 3 270M model.

Owns: generating tests/fixtures/gemma3_reference.json with llama-cpp-python
(the oracle, see tools/install_reference.sh) on the default model
(gemma-3-270m-q4_k_m.gguf): prompt token ids (add_bos=True), greedy
continuations (argmax of the raw logits, computed here, no sampler), and
teacher-forced logits subsets for every position (top-16 ids at the position
plus a fixed set of random ids), including one prompt longer than the 512-token
sliding window.
Does NOT: test anything (the C++ tests read the JSON), or store full logits rows
(262144 floats each; the subsets keep the file small).

Usage: python3 tools/make_gemma3_fixtures.py [-m MODEL] [-o OUT]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
N_CTX = 2048
N_THREADS = 2
N_TOP = 16
N_FIXED = 32
FIXED_SEED = 1234

# (name, text, greedy tokens, record teacher logits for the last K positions; None = all)
SHORT_PROMPTS = [
    ("capital", "The capital of France is", 64, None),
    ("code", "def fibonacci(n):\n", 64, None),
    ("story",
     "Once upon a time, in a small village at the edge of a great forest, there lived an old "
     "clockmaker named Elias. Every morning he opened his shop before sunrise, and every evening "
     "he wound the hundred clocks that hung on its walls. One winter night, a stranger knocked "
     "on his door carrying a broken pocket watch.", 64, None),
    ("list", "Here is a list of the planets of the solar system, in order from the Sun:\n1.", 64, None),
    ("json", "{\"name\": \"Ada Lovelace\", \"born\": 1815, \"known_for\": [", 64, None),
    ("french", "La tour Eiffel est un monument situé à Paris. Elle", 64, None),
]


def long_prompt_text() -> str:
    """Deterministic text of well over 600 tokens, varied so it is not one repeated n-gram."""
    subjects = ["The river", "A merchant", "The old library", "Our teacher", "The northern wind",
                "A young engineer", "The city council", "My grandmother", "The lighthouse keeper",
                "A travelling musician", "The mountain village", "The research team"]
    verbs = ["remembered", "described", "questioned", "rebuilt", "carried", "painted",
             "measured", "forgot", "celebrated", "explained", "protected", "discovered"]
    objects = ["the first bridge over the valley", "a map of forgotten roads",
               "seventeen letters from the war", "the harvest of that strange year",
               "a song about the sea", "the rules of an ancient game",
               "the price of bread in 1847", "a garden full of lemon trees",
               "the broken telescope", "the names of every star they could see",
               "a recipe for chestnut soup", "the long winter of the drought"]
    sentences = []
    for i in range(44):
        s = subjects[i % len(subjects)]
        v = verbs[(i * 5 + 3) % len(verbs)]
        o = objects[(i * 7 + 1) % len(objects)]
        sentences.append(f"In chapter {i + 1}, {s.lower() if i % 3 == 0 else s} {v} {o}.")
    return "Notes from a long book. " + " ".join(sentences) + " In the final chapter,"


LONG_PROMPT = ("long_window", long_prompt_text(), 16, 32)


def default_model() -> Path:
    env = os.environ.get("SPECULA_MODELS")
    base = Path(env) if env else Path.home() / ".cache" / "specula" / "models"
    return base / MODEL_FILE


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def r(x: float) -> float:
    return round(float(x), 4)


class Oracle:
    def __init__(self, model: Path):
        import llama_cpp
        self.version = llama_cpp.__version__
        self.llm = llama_cpp.Llama(model_path=str(model), n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=512,
                                   n_threads=N_THREADS, n_threads_batch=N_THREADS,
                                   logits_all=True, verbose=False, seed=0)
        self.n_vocab = self.llm.n_vocab()

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        """Greedy continuation: one eval of the prompt, then one eval per new token."""
        self.llm.reset()
        self.llm.eval(prompt)
        out: list[int] = []
        for step in range(n):
            logits = self.llm.scores[self.llm.n_tokens - 1]
            tok = int(np.argmax(logits))
            out.append(tok)
            if step + 1 < n:
                self.llm.eval([tok])
        return out

    def teacher(self, ids: list[int]) -> np.ndarray:
        """Logits [len(ids), n_vocab] from one eval of the whole sequence (fresh cache)."""
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)], dtype=np.float32)


def logits_record(logits: np.ndarray, first_pos: int, fixed_ids: np.ndarray) -> dict:
    rows = logits[first_pos:]
    top = np.argsort(-rows, axis=1, kind="stable")[:, :N_TOP]
    mx = rows.max(axis=1, keepdims=True)
    lse = (mx[:, 0] + np.log(np.exp(rows - mx).sum(axis=1))).tolist()
    return {
        "first_pos": first_pos,
        "argmax": [int(a) for a in rows.argmax(axis=1)],
        "logsumexp": [r(v) for v in lse],
        "top_ids": [[int(t) for t in row] for row in top],
        "top_logits": [[r(rows[i, t]) for t in top[i]] for i in range(rows.shape[0])],
        "fixed_logits": [[r(v) for v in rows[i, fixed_ids]] for i in range(rows.shape[0])],
    }


FORMAT = (
    "cases[]: name; text; prompt_ids (llama.cpp tokenize, add_bos=True, special=False); "
    "greedy_ids: n_greedy tokens from greedy decoding (argmax of raw logits; prompt evaluated once, "
    "then one token per step; no stop at EOS); greedy_text: detokenized greedy_ids (for humans); "
    "teacher: logits of one forward over ids = prompt_ids + greedy_ids (fresh cache), rows for "
    "positions first_pos..len(ids)-1, where row p holds the logits that predict ids[p+1]: "
    "argmax[row] (argmax id), logsumexp[row] (log of the softmax normaliser), top_ids[row] / "
    "top_logits[row] (the 16 largest logits, descending), fixed_logits[row][j] = logit of "
    "fixed_ids[j]. Logits are rounded to 4 decimals. Note: greedy_ids[k] == argmax of row "
    "len(prompt_ids)-1+k except near ties between incremental and batched evaluation."
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", type=Path, default=default_model())
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "tests" / "fixtures" / "gemma3_reference.json")
    args = ap.parse_args()
    if not args.model.exists():
        print(f"[fixtures] model not found: {args.model} (run scripts/fetch_model.sh)", file=sys.stderr)
        return 1

    oracle = Oracle(args.model)
    fixed_ids = np.sort(np.random.RandomState(FIXED_SEED).choice(oracle.n_vocab, N_FIXED, replace=False))
    cases = []
    for name, text, n_greedy, last_k in SHORT_PROMPTS + [LONG_PROMPT]:
        prompt = oracle.tokenize(text)
        greedy = oracle.greedy(prompt, n_greedy)
        ids = prompt + greedy
        logits = oracle.teacher(ids)
        first = 0 if last_k is None else len(ids) - last_k
        rec = logits_record(logits, first, fixed_ids)
        agree = sum(int(rec["argmax"][len(prompt) - 1 - first + k] == g) for k, g in enumerate(greedy)
                    if len(prompt) - 1 - first + k >= 0)
        print(f"[fixtures] {name}: prompt {len(prompt)} tokens, greedy {len(greedy)}, "
              f"teacher rows {len(ids) - first}, greedy/teacher argmax agreement {agree}/{len(greedy)}",
              file=sys.stderr)
        cases.append({
            "name": name,
            "text": text,
            "prompt_ids": prompt,
            "n_greedy": n_greedy,
            "greedy_ids": greedy,
            "greedy_text": oracle.llm.detokenize(greedy).decode("utf-8", errors="replace"),
            "teacher": rec,
        })

    doc = {
        "format": FORMAT,
        "generator": "tools/make_gemma3_fixtures.py",
        "llama_cpp_python_version": oracle.version,
        "model_file": MODEL_FILE,
        "model_sha256": sha256_of(args.model),
        "n_vocab": oracle.n_vocab,
        "n_ctx": N_CTX,
        "n_threads": N_THREADS,
        "fixed_ids": [int(i) for i in fixed_ids],
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n")
    os.replace(tmp, args.out)
    print(f"[fixtures] wrote {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
