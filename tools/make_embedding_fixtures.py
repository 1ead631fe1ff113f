#!/usr/bin/env python3
"""tools/make_embedding_fixtures.py — the oracle for `specula serve`'s /v1/embeddings:
llama.cpp's embeddings (llama-cpp-python, the pinned version) of a few texts for a GGUF
model, with mean and last pooling, L2-normalised, written to
tests/fixtures/embeddings/<name>.json (vectors rounded to 6 significant digits).

llama-cpp-python's embed() tokenizes with BOS and without parsing special tokens, runs the
model with causal attention and pools the final-normed hidden states (llama.cpp's
result_norm), as specula does.

Also the tiny random-weight Qwen3.5 models of tools/make_qwen35_fixtures.py (f32 and f16
weights, regenerated from their seeds; the test regenerates them the same way) with
token-id inputs: there no weight quantization separates the two engines, so their
embeddings must agree to the last digits; on a quantized real model the engines' different
activation quantization in the matrix products leaves a visible gap (docs/BENCHMARKS.md).

Usage: tools/make_embedding_fixtures.py [--model GGUF] [--name gemma3_270m]
"""
import argparse
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    "Paris est la capitale de la France. 東京は日本の首都です。",
    "<end_of_turn> is text here, not a control token",
]


def no_repack(llama_cpp):
    """llama.cpp's CPU weight repacking crashes on AMX machines (ggml_backend_amx_mul_mat):
    load without the extra buffer types (llama-bench --repack 0), same results."""
    low = llama_cpp.llama_cpp
    default = low.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p
    low.llama_model_default_params = params


def tiny_inputs(seed, vocab):
    import numpy as np
    rng = np.random.default_rng(seed)
    return [[0] + [int(x) for x in rng.integers(2, vocab, n)] for n in (4, 11, 37)]


def tiny_models(llama_cpp):
    import sys
    import tempfile
    sys.path.insert(0, str(ROOT / "tools"))
    import make_qwen35_fixtures as q
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("tiny_a", "tiny_b"):
            path = os.path.join(tmp, f"qwen35_{name}.gguf")
            q.write_model(name, path)
            vocab = 256 if name == "tiny_a" else 300
            inputs = tiny_inputs(q.SHAPES[name]["seed"] + 77, vocab)
            entry = {"sha256": q.sha256(path), "inputs": inputs, "pooling": {}}
            for pname, kind in (("mean", llama_cpp.LLAMA_POOLING_TYPE_MEAN), ("last", llama_cpp.LLAMA_POOLING_TYPE_LAST)):
                llm = llama_cpp.Llama(model_path=path, embedding=True, pooling_type=kind, n_ctx=256, n_threads=2,
                                      verbose=False)
                by_key = {f"in{k}": ids for k, ids in enumerate(inputs)}
                llm.tokenize = lambda b, add_bos=True, special=False: by_key[b.decode()]  # token-id inputs
                entry["pooling"][pname] = [[float(f"{x:.7g}") for x in llm.embed(f"in{k}", normalize=True)]
                                           for k in range(len(inputs))]
                del llm
            out[name] = entry
    return out


def main():
    import llama_cpp
    no_repack(llama_cpp)
    ap = argparse.ArgumentParser()
    models = Path(os.environ.get("SPECULA_MODELS", Path.home() / ".cache/specula/models"))
    ap.add_argument("--model", default=str(models / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--name", default="gemma3_270m")
    a = ap.parse_args()
    out = {"generator": "tools/make_embedding_fixtures.py", "llama_cpp_python_version": llama_cpp.__version__,
           "model_file": os.path.basename(a.model), "texts": TEXTS, "pooling": {}}
    for name, kind in (("mean", llama_cpp.LLAMA_POOLING_TYPE_MEAN), ("last", llama_cpp.LLAMA_POOLING_TYPE_LAST)):
        llm = llama_cpp.Llama(model_path=a.model, embedding=True, pooling_type=kind, n_ctx=512, n_threads=2,
                              verbose=False)
        vecs = [llm.embed(t, normalize=True) for t in TEXTS]
        out["pooling"][name] = [[float(f"{x:.6g}") for x in v] for v in vecs]
        out.setdefault("n_tokens", [len(llm.tokenize(t.encode())) for t in TEXTS])
        del llm
    out["tiny"] = tiny_models(llama_cpp)
    dst = ROOT / "tests" / "fixtures" / "embeddings" / f"{a.name}.json"
    dst.write_text(json.dumps(out))
    print(f"wrote {dst} ({len(TEXTS)} texts x mean/last, dim {len(out['pooling']['mean'][0])})")


if __name__ == "__main__":
    main()
