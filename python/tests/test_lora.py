"""LoRA adapters through the Python package: llama-cpp-python's Llama(lora_path, lora_scale)
applies the adapter to every call, giving what `specula generate --lora FILE --lora-scale S`
gives (the command line's own engine) and not the base model's text; Llama.lora_load adds
more, whose global scale 0 leaves calls unchanged; specula.Engine selects adapters per call
({"model": name}). The adapter is a random rank-4 one written by tools/make_lora_fixtures.py
(numpy and gguf; the test skips without them). The C++ tests judge the LoRA arithmetic against
llama.cpp (tests/model/lora_test.cpp)."""
import os
import subprocess
import sys

import pytest

from specula import Engine, Llama

from conftest import ROOT, cli_path

PROMPT = "def fibonacci(n):"


@pytest.fixture(scope="module")
def adapter(qwen_path, tmp_path_factory):
    try:
        import gguf  # noqa: F401
        import numpy  # noqa: F401
    except ImportError:
        pytest.skip("numpy and gguf are needed to write the adapter")
    out = str(tmp_path_factory.mktemp("lora") / "random.gguf")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_lora_fixtures.py"), "--adapter-for", qwen_path,
                    "--out", out, "--rank", "4", "--seed", "1"], check=True)
    return out


def cli(qwen_path, *extra):
    r = subprocess.run([cli_path(), "generate", "-m", qwen_path, "-p", PROMPT, "-n", "12", "--temp", "0", "-t", "2",
                        *extra], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(PROMPT) and r.stdout.endswith("\n")
    return r.stdout[len(PROMPT):-1]


def test_lora_path_as_llama_cpp_python(qwen_path, adapter):
    want = cli(qwen_path, "--lora", adapter, "--lora-scale", "0.3")
    base = cli(qwen_path)
    assert want != base, "the adapter changes nothing at scale 0.3"
    llm = Llama(qwen_path, n_ctx=256, n_threads=2, verbose=False, lora_path=adapter, lora_scale=0.3)
    try:
        got = llm.create_completion(PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"]
        assert got == want
        assert [(a["id"], a["name"], a["scale"]) for a in llm.lora_adapters()] == [(0, "random", pytest.approx(0.3))]
        # A second adapter at global scale 0 changes nothing; unloaded, it is gone.
        assert llm.lora_load(adapter, name="second", scale=0.0) == 1
        assert llm.create_completion(PROMPT, max_tokens=12, temperature=0)["choices"][0]["text"] == want
        llm.lora_unload("second")
        assert [a["name"] for a in llm.lora_adapters()] == ["random"]
    finally:
        llm.close()


def test_engine_selects_adapters_per_call(qwen_path, adapter):
    want = cli(qwen_path, "--lora", adapter)
    base = cli(qwen_path)
    with Engine(qwen_path, n_ctx=256, n_threads=2) as eng:
        eng.lora_load(adapter, name="rnd", scale=0.0)
        body = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0}
        assert eng.call("/v1/completions", {**body, "model": "rnd"})["choices"][0]["text"] == want
        assert eng.call("/v1/completions", body)["choices"][0]["text"] == base
        assert eng.call("/v1/completions", {**body, "lora": [{"id": 0, "scale": 1}]})["choices"][0]["text"] == want
