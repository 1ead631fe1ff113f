"""Shared set-up of the Python package's tests: the models (~/.cache/specula/models or
$SPECULA_MODELS; a test skips when its model is missing), llama.cpp's reference answers
(tests/fixtures/python/llama_cpp_reference.json, made by tools/make_python_fixtures.py) and
the `specula` command for comparisons with the server ($SPECULA_CLI or build/release)."""
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.environ.get("SPECULA_MODELS", os.path.expanduser("~/.cache/specula/models"))
GEMMA = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")
QWEN = os.path.join(MODELS, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
REFERENCE = os.path.join(ROOT, "tests", "fixtures", "python", "llama_cpp_reference.json")
GEMMA_TEMPLATE = os.path.join(ROOT, "tests", "fixtures", "chat_templates", "gemma3.jinja")


def need(path):
    if not os.path.exists(path):
        pytest.skip(f"model not found: {path} (./scripts/fetch_model.sh)")
    return path


@pytest.fixture(scope="session")
def reference():
    with open(REFERENCE) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def qwen_path():
    return need(QWEN)


@pytest.fixture(scope="session")
def gemma_path():
    return need(GEMMA)


def cli_path():
    p = os.environ.get("SPECULA_CLI", os.path.join(ROOT, "build", "release", "specula"))
    if not os.path.exists(p):
        pytest.skip(f"the specula command is not built at {p}")
    return p


def first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n if len(a) != len(b) else -1


# How close to llama.cpp's top a candidate must be for the engines to pick either: both
# quantize activations to 8 bits and sit ~0.3 logit (mean, up to several on rare positions)
# from a float64 evaluation of the same weights (docs/BENCHMARKS.md "Accuracy"), and a gap
# between two logits carries both engines' errors. Measured on an AVX2 machine (Gemma 3 270M,
# "import numpy as np" at 'torch.nn.'): float64 puts 'utils' 0.23 above 'init', llama.cpp
# 0.89 above, specula 0.21-0.26 below (generic kernels: 0.09 above) — a near tie of the exact
# model that llama.cpp's numbers alone put at 0.89.
NEAR_TIE = 1.0


def near_tie_at(ref_completion: dict, got: str, char_index: int) -> bool:
    """Whether specula's text, differing from llama.cpp's from char_index on, took another of
    llama.cpp's candidates at a near tie: the differing token is one where specula's text
    there starts with a candidate of llama.cpp's top 5 within NEAR_TIE of its top, not a
    prefix of llama.cpp's own token (`near`;
    fixtures without it: the runner-up, when the top-2 margin is under NEAR_TIE)."""
    pos = 0
    n = len(ref_completion["tokens"])
    runner_up = ref_completion.get("runner_up", [None] * n)
    near = ref_completion.get("near")
    for i, (tok, margin) in enumerate(zip(ref_completion["tokens"], ref_completion["margins"])):
        if char_index < pos + max(1, len(tok)):
            if near is not None:
                # A candidate that is a prefix of llama.cpp's token (' ' of ' capital') would
                # accept any divergence after it: it explains none.
                return any(got[pos:].startswith(t) and not tok.startswith(t)
                           for t, gap in near[i] if gap < NEAR_TIE)
            took_second = runner_up[i] is not None and got[pos:].startswith(runner_up[i])
            return margin < NEAR_TIE and took_second
        pos += len(tok)
    return False
