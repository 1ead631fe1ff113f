#!/usr/bin/env python3
"""tools/make_qwen2_fixtures.py — llama.cpp reference data for the Qwen2.5-Coder models.

Owns: generating tests/fixtures/qwen2_reference.json with llama-cpp-python (the
oracle, see tools/install_reference.sh) on both Qwen2 files — the 1.5B target and the
0.5B draft (qwen2.5-coder-{1.5b,0.5b}-instruct-q4_k_m.gguf): for each of a few prompts
(plain text, code, and a chat-formatted prompt with <|im_start|>/<|im_end|> special
tokens), the prompt token ids as llama.cpp tokenizes them (add_bos=True — Qwen's GGUF
says add_bos_token false, so no BOS is added — and special=True), a greedy
continuation (argmax of the raw logits; prompt evaluated once, then one token per
step, no stop at EOS) with llama.cpp's own top-2 margin at every step, and
teacher-forced top-5 ids/logits for every position of one forward over prompt +
continuation.
Does NOT: test anything (tests/model/qwen2_test.cpp reads the JSON), or store full
logits rows (151936 floats each).

Usage: python3 tools/make_qwen2_fixtures.py [--models-dir DIR] [-o OUT]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODEL_FILES = {
    "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
N_CTX = 512
N_THREADS = 2
N_TOP = 5
N_GREEDY = 40

# (name, text)
PROMPTS = [
    ("capital", "The capital of France is"),
    ("python", "def quicksort(arr):\n"),
    ("cpp", "#include <vector>\n\n// Returns the sum of the elements of v.\nint sum(const std::vector<int>& v) {\n"),
    ("chat", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
             "Write a Python function that checks whether a number is prime.<|im_end|>\n"
             "<|im_start|>assistant\n"),
    ("list", "Here is a list of the planets of the solar system, in order from the Sun:\n1."),
]


def models_dir() -> Path:
    env = os.environ.get("SPECULA_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "specula" / "models"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def r(x: float) -> float:
    return round(float(x), 4)


def top2_margin(row: np.ndarray) -> float:
    a, b = np.partition(row, -2)[-2:]
    return float(max(a, b) - min(a, b))


class Oracle:
    def __init__(self, model: Path):
        import llama_cpp
        self.version = llama_cpp.__version__
        self.llm = llama_cpp.Llama(model_path=str(model), n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=512,
                                   n_threads=N_THREADS, n_threads_batch=N_THREADS,
                                   logits_all=True, verbose=False, seed=0)
        self.n_vocab = self.llm.n_vocab()

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)

    def greedy(self, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
        """Greedy continuation and llama.cpp's top-2 margin at each step."""
        self.llm.reset()
        self.llm.eval(prompt)
        out: list[int] = []
        margins: list[float] = []
        for step in range(n):
            logits = np.asarray(self.llm.scores[self.llm.n_tokens - 1], dtype=np.float32)
            tok = int(np.argmax(logits))
            out.append(tok)
            margins.append(r(top2_margin(logits)))
            if step + 1 < n:
                self.llm.eval([tok])
        return out, margins

    def teacher(self, ids: list[int]) -> np.ndarray:
        """Logits [len(ids), n_vocab] from one eval of the whole sequence (fresh cache)."""
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)], dtype=np.float32)


def teacher_record(logits: np.ndarray) -> dict:
    top = np.argsort(-logits, axis=1, kind="stable")[:, :N_TOP]
    return {
        "top_ids": [[int(t) for t in row] for row in top],
        "top_logits": [[r(logits[i, t]) for t in top[i]] for i in range(logits.shape[0])],
    }


FORMAT = (
    "models[]: key; model_file; model_sha256; n_vocab; cases[]. cases[]: name; text; prompt_ids "
    "(llama.cpp tokenize, add_bos=True (the file adds none), special=True); greedy_ids: greedy "
    "decoding (argmax of raw logits; prompt evaluated once, then one token per step; no stop at "
    "EOS); greedy_margin[k]: llama.cpp's top-1 minus top-2 logit at the step that chose "
    "greedy_ids[k]; greedy_text: detokenized greedy_ids (for humans); teacher: one forward over "
    "ids = prompt_ids + greedy_ids (fresh cache), row p (0..len(ids)-1) predicts ids[p+1]: "
    "top_ids[p] / top_logits[p] = the 5 largest logits, descending. Logits rounded to 4 decimals."
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models-dir", type=Path, default=models_dir())
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "tests" / "fixtures" / "qwen2_reference.json")
    args = ap.parse_args()

    models = []
    for key, fname in MODEL_FILES.items():
        path = args.models_dir / fname
        if not path.exists():
            print(f"[fixtures] model not found: {path} (run scripts/fetch_model.py {key})", file=sys.stderr)
            return 1
        oracle = Oracle(path)
        cases = []
        for name, text in PROMPTS:
            prompt = oracle.tokenize(text)
            greedy, margins = oracle.greedy(prompt, N_GREEDY)
            ids = prompt + greedy
            logits = oracle.teacher(ids)
            rec = teacher_record(logits)
            agree = sum(int(rec["top_ids"][len(prompt) - 1 + k][0] == g) for k, g in enumerate(greedy))
            print(f"[fixtures] {key} {name}: prompt {len(prompt)} tokens, greedy {len(greedy)}, min margin "
                  f"{min(margins):.3f}, greedy/teacher argmax agreement {agree}/{len(greedy)}", file=sys.stderr)
            cases.append({
                "name": name,
                "text": text,
                "prompt_ids": prompt,
                "greedy_ids": greedy,
                "greedy_margin": margins,
                "greedy_text": oracle.llm.detokenize(greedy).decode("utf-8", errors="replace"),
                "teacher": rec,
            })
        models.append({
            "key": key,
            "model_file": fname,
            "model_sha256": sha256_of(path),
            "n_vocab": oracle.n_vocab,
            "cases": cases,
        })
        del oracle

    doc = {
        "format": FORMAT,
        "generator": "tools/make_qwen2_fixtures.py",
        "llama_cpp_python_version": __import__("llama_cpp").__version__,
        "n_ctx": N_CTX,
        "n_threads": N_THREADS,
        "models": models,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n")
    os.replace(tmp, args.out)
    print(f"[fixtures] wrote {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
