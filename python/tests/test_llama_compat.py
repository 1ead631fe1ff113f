"""specula.Llama behaves as llama-cpp-python's Llama where programs notice: seeds (a run of
sampled calls is reproducible from the constructor's seed, and calls differ from each other),
the context (a prompt that fills it raises ValueError; max_tokens is cut to what is left),
n_ctx=0 (the model's training context), and a model kept alive by what runs on it."""
import gc

import pytest

import specula
from specula import Engine, Llama


def texts(llm, n=2):
    return [llm("Once upon a time", max_tokens=12, temperature=0.9)["choices"][0]["text"] for _ in range(n)]


def test_seed_sequence_is_reproducible(qwen_path):
    a = Llama(qwen_path, n_ctx=256, seed=1234, verbose=False)
    first = texts(a)
    a.close()
    b = Llama(qwen_path, n_ctx=256, seed=1234, verbose=False)
    again = texts(b)
    assert again == first                      # the same constructor seed, the same run
    assert first[0] != first[1]                # and each call draws anew
    c = b("Once upon a time", max_tokens=12, temperature=0.9, seed=7)["choices"][0]["text"]
    d = b("Once upon a time", max_tokens=12, temperature=0.9, seed=7)["choices"][0]["text"]
    assert c == d                              # an explicit seed reproduces
    b.close()


def test_context_is_cut_as_llama_cpp_does(qwen_path):
    llm = Llama(qwen_path, n_ctx=64, verbose=False)
    prompt = "one two three four five six seven eight nine ten " * 2
    n = len(llm.tokenize(prompt.encode()))
    r = llm(prompt, max_tokens=500, temperature=0)
    assert r["usage"]["completion_tokens"] <= 64 - n and r["choices"][0]["finish_reason"] == "length"
    with pytest.raises(ValueError, match="exceed context window"):
        llm("word " * 100, max_tokens=4)
    r = llm.create_chat_completion([{"role": "user", "content": "Count to one hundred."}], max_tokens=500, temperature=0)
    assert r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] <= 64
    llm.close()


def test_n_ctx_zero_is_the_training_context(qwen_path):
    llm = Llama(qwen_path, n_ctx=0, verbose=False)
    assert llm.n_ctx() == int(llm.metadata["qwen2.context_length"])
    llm.close()


def test_requests_keep_their_model(qwen_path):
    req = Engine(qwen_path, n_parallel=1, n_threads=2, cache_ram_mib=0).submit("Once upon a time", max_tokens=8,
                                                                                 temperature=0)
    gc.collect()  # the Engine object is gone; its request still runs to its end
    assert req.result().finish_reason == "length"
    stream = Llama(qwen_path, n_ctx=256, verbose=False)("Once upon a time", max_tokens=8, stream=True, temperature=0)
    gc.collect()
    assert len(list(stream)) >= 8
