"""Bad input never crashes the interpreter: a missing model, a wrong type of argument, an
unknown option, a bad request field, a closed model — each a Python exception whose message
names the problem."""
import os

import pytest

import specula
from specula import Engine, Llama


@pytest.fixture(scope="module")
def llm(qwen_path):
    m = Llama(qwen_path, n_ctx=512, n_threads=2, verbose=False)
    yield m
    m.close()


def test_missing_model():
    with pytest.raises(ValueError, match="does not exist"):
        Llama("/no/such/model.gguf")
    with pytest.raises(specula.ModelNotFound):
        Engine("/no/such/model.gguf")


def test_not_a_model(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(200))
    with pytest.raises(ValueError) as e:  # as llama-cpp-python: a file that is not a model
        Llama(str(bad))
    assert "gguf" in str(e.value).lower() and isinstance(e.value, specula.InvalidArgument)
    with pytest.raises(specula.InvalidArgument, match="config.json"):
        Llama(str(tmp_path))  # a folder that is not a model folder


def test_unknown_option(qwen_path):
    with pytest.raises(TypeError, match="n_ctxx"):
        Llama(qwen_path, n_ctxx=512)
    with pytest.raises(NotImplementedError, match="lora_base"):
        Llama(qwen_path, lora_path="x.gguf", lora_base="base.gguf")
    with pytest.raises(specula.ModelNotFound, match="x.gguf"):
        Llama(qwen_path, lora_path="x.gguf")
    with pytest.raises(specula.InvalidArgument, match="not a LoRA adapter"):
        Llama(qwen_path, lora_path=qwen_path)  # a model given as the adapter
    with pytest.raises(TypeError, match="unknown model parameter"):
        Engine(qwen_path, no_such_thing=1)
    with pytest.raises(specula.InvalidArgument, match="n_parallel|parallel"):
        Engine(qwen_path, n_parallel=100000)
    with pytest.raises(specula.InvalidArgument, match="type_k"):
        Llama(qwen_path, type_k=99)


def test_wrong_types(llm):
    with pytest.raises(TypeError, match="bytes"):
        llm.tokenize("a str, not bytes")
    with pytest.raises(TypeError):
        llm.create_completion(12345)
    with pytest.raises(TypeError):
        llm.create_chat_completion("not a list")
    with pytest.raises(TypeError):
        llm.detokenize(["a", "b"])
    with pytest.raises(specula.InvalidArgument, match="outside the vocabulary"):
        llm.detokenize([10**8])


def test_bad_request_fields(llm):
    with pytest.raises(specula.InvalidArgument, match="temperature"):
        llm.create_completion("Hi", temperature=-3)
    with pytest.raises(specula.InvalidArgument, match="top_k"):
        llm.create_completion("Hi", top_k=-5)
    with pytest.raises(specula.ContextOverflow):
        llm.create_completion("Hi " * 600, max_tokens=16)
    with pytest.raises(specula.InvalidArgument, match="response_format"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], response_format={"type": "xml"})
    with pytest.raises(NotImplementedError):
        llm.create_completion("Hi", logits_processor=[lambda ids, scores: scores])
    with pytest.raises(RuntimeError, match="embedding=True"):
        llm.embed("text")
    # The model still answers after all of that.
    assert llm.create_completion("Hi", max_tokens=2, temperature=0)["choices"][0]["finish_reason"] == "length"


def test_engine_bad_requests(qwen_path):
    e = Engine(qwen_path, n_parallel=2, n_ctx=512, n_threads=2, cache_ram_mib=0)
    with pytest.raises(ValueError, match="prompt or messages"):
        e.submit()
    with pytest.raises(TypeError):
        e.submit("x", temperature="hot")
    with pytest.raises(specula.InvalidArgument, match="json_schema|grammar"):
        e.submit("x", json_schema={"type": "no-such-type"})
    with pytest.raises(specula.InvalidArgument, match="vocabulary"):
        e.submit([10**8])
    with pytest.raises(specula.ContextOverflow):
        e.submit("word " * 600, max_tokens=8)
    e.close()
    with pytest.raises(specula.Closed):
        e.submit("x")


def test_unknown_route_and_bytes(qwen_path):
    e = Engine(qwen_path, n_parallel=1, n_ctx=512, n_threads=2, cache_ram_mib=0)
    with pytest.raises(specula.NotFound, match="no route"):
        e.call("/v1/nothing", {})
    assert e.tokenize(b"Hello") == e.tokenize("Hello")
    with pytest.raises(TypeError):
        e.tokenize(42)
    e.close()


def test_closed_model(qwen_path):
    llm = Llama(qwen_path, n_ctx=256, n_threads=2, verbose=False)
    stream = llm.create_completion("Once upon a time", max_tokens=200, stream=True, temperature=0)
    next(stream)
    llm.close()
    # A stream that was running ends with Closed (cancelled), not a crash.
    with pytest.raises(specula.Closed, match="shutting down|cancelled"):
        list(stream)
    with pytest.raises(specula.Closed):
        llm.create_completion("Hi")
    with pytest.raises(specula.Closed):
        llm.tokenize(b"Hi")
    llm.close()  # twice is fine
