"""specula.Engine: concurrent requests from threads and asyncio get exactly their solo
outputs (batch invariance); cancellation — breaking out, cancel(), garbage collection of an
abandoned iterator, Ctrl-C — frees the request's row within two engine steps."""
import _thread
import asyncio
import gc
import threading
import time

import pytest

from specula import Engine, Llama

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time", "import numpy as np\n",
           "Q: What is 12 times 12?\nA:", "The quick brown fox", "SELECT * FROM", "Dear Sir or Madam,"]


@pytest.fixture(scope="module")
def engine(qwen_path):
    e = Engine(qwen_path, n_parallel=8, n_ctx=8192, n_threads=2, cache_ram_mib=0)
    yield e
    e.close()


def solo(engine, prompt, **kw):
    return engine.generate(prompt, max_tokens=24, temperature=0.7, seed=11, **kw)


def test_eight_threads_get_their_solo_outputs(engine):
    want = {p: solo(engine, p).tokens for p in PROMPTS}
    got = {}

    def run(p):
        got[p] = engine.generate(p, max_tokens=24, temperature=0.7, seed=11).tokens

    threads = [threading.Thread(target=run, args=(p,)) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == want


def test_asyncio_requests_get_their_solo_outputs(engine):
    want = [solo(engine, p).text for p in PROMPTS]

    async def main():
        return await asyncio.gather(*[engine.agenerate(p, max_tokens=24, temperature=0.7, seed=11) for p in PROMPTS])

    got = asyncio.run(main())
    assert [c.text for c in got] == want


def test_events_add_up_to_the_result(engine):
    req = engine.submit("def add(a, b):", max_tokens=20, temperature=0, logprobs=0)
    tokens, text = [], ""
    for ev in req:
        tokens += ev.tokens
        text += ev.text
        assert ev.logprobs is not None and len(ev.logprobs) == len(ev.tokens)
    r = req.result()
    assert r.tokens == tokens and r.text == text and r.finish_reason in ("stop", "length")
    assert r.completion_tokens >= len(tokens) and r.prompt_tokens > 0
    assert engine.detokenize(tokens) == text


def test_stop_strings_grammar_and_messages(engine):
    r = engine.generate("Count: 1, 2, 3,", max_tokens=40, temperature=0, stop=[" 6"])
    assert r.finish_reason == "stop" and r.stop_sequence == " 6" and " 6" not in r.text
    r = engine.generate("Pick a color:", max_tokens=10, temperature=0, regex="(red|green|blue)")
    assert r.text in ("red", "green", "blue")
    r = engine.generate(messages=[{"role": "user", "content": "Say OK."}], max_tokens=8, temperature=0)
    assert r.text and r.finish_reason in ("stop", "length")


def wait_rows_free(engine, steps_at_cancel, what):
    deadline = time.time() + 10
    while time.time() < deadline:
        s = engine.stats()
        if s["running_rows"] == 0 and s["queue_depth"] == 0:
            assert s["steps"] - steps_at_cancel <= 2, f"{what}: the row went after {s['steps'] - steps_at_cancel} steps"
            return
        time.sleep(0.005)
    pytest.fail(f"{what}: the row was not freed")


def long_request(engine):
    req = engine.submit("Tell me a long story.", max_tokens=900, temperature=0.8, seed=3, ignore_eos=True)
    it = iter(req)
    for _ in range(3):
        next(it)
    return req, it


def test_cancel_frees_the_row(engine):
    req, _ = long_request(engine)
    req.cancel()
    wait_rows_free(engine, engine.stats()["steps"], "cancel()")
    assert req.result().finish_reason == "cancelled"


def test_breaking_out_frees_the_row(engine):
    req, it = long_request(engine)
    it.close()  # what `break` out of a for loop over the generator does
    wait_rows_free(engine, engine.stats()["steps"], "break")


def test_garbage_collected_iterator_frees_the_row(engine):
    req, it = long_request(engine)
    del req, it
    gc.collect()
    wait_rows_free(engine, engine.stats()["steps"], "garbage collection")


def test_ctrl_c_cancels(engine):
    req = engine.submit("Tell me a long story.", max_tokens=900, temperature=0.8, seed=3, ignore_eos=True)
    threading.Timer(0.5, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        req.result()
    wait_rows_free(engine, engine.stats()["steps"], "Ctrl-C")


def test_llama_stream_break_frees_the_row(qwen_path):
    llm = Llama(qwen_path, n_ctx=1024, n_threads=2, verbose=False)
    stream = llm.create_completion("Tell me a long story.", max_tokens=500, stream=True, temperature=0.8)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    wait_rows_free(llm._model, llm._model.stats()["steps"], "a Llama stream left")
    threading.Timer(0.5, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        llm.create_completion("Tell me a long story.", max_tokens=800, temperature=0.8)
    wait_rows_free(llm._model, llm._model.stats()["steps"], "Ctrl-C in a Llama call")
    llm.close()
