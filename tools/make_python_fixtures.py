#!/usr/bin/env python3
"""tools/make_python_fixtures.py — llama-cpp-python (llama.cpp) as the oracle of the Python
package's tests (python/tests/): writes tests/fixtures/python/llama_cpp_reference.json with,
per model (Gemma 3 270M, Qwen2.5-Coder 0.5B Instruct, from ~/.cache/specula/models):
  - tokenize: llama-cpp-python's ids for a set of texts (add_bos=True, special=False), and
    its detokenize of those ids (special=False and True);
  - completions: for a set of prompts, the greedy continuation (max_tokens 32, temperature 0)
    with, per generated token, its text, the margin between the two most likely tokens, the
    runner-up's text and every candidate of llama.cpp's top 5 within NEAR_TIE of the top
    (`near`: [text, gap]), so that a test can tell a real difference from a near tie (two
    CPUs' kernels round differently: where three candidates lie within 0.1 either may win);
  - script (Qwen): the output of python/tests/llama_cpp_script.py (completion, chat, stream,
    tools, json_schema, embeddings) run with llama-cpp-python itself.
Needs tools/install_reference.sh (llama-cpp-python built from source). Run from anywhere:
  python3 tools/make_python_fixtures.py
"""
import json
import os
import subprocess
import sys

from llama_cpp import Llama
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("SPECULA_MODELS", os.path.expanduser("~/.cache/specula/models"))
OUT = os.path.join(ROOT, "tests", "fixtures", "python", "llama_cpp_reference.json")

TEXTS = ["Hello world", "def quicksort(arr):\n    return sorted(arr)", "  leading spaces and\ttabs\n\nnewlines",
         "Unicode: été, 日本語, emoji 🙂", "<|im_start|>user not parsed as special", "1234567890 3.14159"]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "import numpy as np\n\n", "Q: What is 12 times 12?\nA:"]


NEAR_TIE = 1.0  # python/tests/conftest.py's


def completions(llm):
    out = []
    for p in PROMPTS:
        r = llm.create_completion(p, max_tokens=32, temperature=0.0, logprobs=5)
        c = r["choices"][0]
        lp = c["logprobs"]
        margins, runner_up, near = [], [], []
        for top in lp["top_logprobs"]:
            ranked = sorted(top.items(), key=lambda kv: -kv[1])
            margins.append(round(float(ranked[0][1] - ranked[1][1]), 5) if len(ranked) > 1 else 99.0)
            runner_up.append(ranked[1][0] if len(ranked) > 1 else None)
            near.append([[t, round(float(ranked[0][1] - v), 5)] for t, v in ranked[1:]
                         if ranked[0][1] - v < NEAR_TIE])
        out.append({"prompt": p, "text": c["text"], "tokens": lp["tokens"], "margins": margins,
                    "runner_up": runner_up, "near": near, "finish_reason": c["finish_reason"]})
    return out


def main():
    ref = {"llama_cpp_python": llama_cpp.__version__, "models": {}}
    for name, file in [("gemma3_270m", "gemma-3-270m-q4_k_m.gguf"),
                       ("qwen25_coder_05b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")]:
        path = os.path.join(MODELS, file)
        llm = Llama(model_path=path, n_ctx=2048, n_threads=2, logits_all=True, verbose=False)
        tok = []
        for t in TEXTS:
            ids = llm.tokenize(t.encode(), add_bos=True, special=False)
            tok.append({"text": t, "ids": ids,
                        "detokenize": llm.detokenize(ids).decode("utf-8", "replace"),
                        "detokenize_special": llm.detokenize(ids, special=True).decode("utf-8", "replace")})
        m = {"file": file, "tokenize": tok,
             "completions": completions(llm)}
        llm.close()
        if name.startswith("qwen"):
            r = subprocess.run([sys.executable, os.path.join(ROOT, "python", "tests", "llama_cpp_script.py"), path],
                               capture_output=True, text=True, check=True)
            m["script"] = json.loads(r.stdout.strip().splitlines()[-1])
        ref["models"][name] = m
        print(f"{name}: done", file=sys.stderr)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(OUT)


if __name__ == "__main__":
    main()
