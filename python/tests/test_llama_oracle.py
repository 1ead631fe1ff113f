"""specula.Llama against llama.cpp (llama-cpp-python's answers, committed) and against the
server on the same GGUF: tokenize ids equal; greedy completions and chats give the same text
(where llama.cpp's top-2 margin is not a near tie)."""
import json
import re
import subprocess
import time
import urllib.request

import pytest

from conftest import GEMMA_TEMPLATE, cli_path, first_difference, near_tie_at
from specula import Llama

MODELS = [("gemma3_270m", "gemma_path"), ("qwen25_coder_05b", "qwen_path")]


@pytest.fixture(scope="module", params=MODELS, ids=[m[0] for m in MODELS])
def model(request, reference):
    name, path_fixture = request.param
    path = request.getfixturevalue(path_fixture)
    llm = Llama(path, n_ctx=2048, n_threads=2, verbose=False)
    yield name, llm, reference["models"][name]
    llm.close()


def test_tokenize_equals_llama_cpp(model):
    _, llm, ref = model
    for case in ref["tokenize"]:
        assert llm.tokenize(case["text"].encode(), add_bos=True, special=False) == case["ids"], case["text"]


def test_greedy_completion_equals_llama_cpp(model):
    _, llm, ref = model
    compared = 0
    for case in ref["completions"]:
        got = llm.create_completion(case["prompt"], max_tokens=32, temperature=0.0)["choices"][0]["text"]
        at = first_difference(got, case["text"])
        if at < 0:
            compared += 1
            continue
        assert near_tie_at(case, got, at), (
            f"{case['prompt']!r}: specula {got!r} vs llama.cpp {case['text']!r} differ at character {at}, where "
            "llama.cpp's choice was not a near tie taken the other way")
    # Measured (2026-12-02): Gemma 3 270M 2 of 5 equal to the last token, the others split at
    # margins 0.035, 0.055, 0.33; Qwen2.5-Coder 0.5B 4 of 5, one split at 0.046.
    assert compared >= 2


def test_detokenize_equals_llama_cpp(model):
    _, llm, ref = model
    for case in ref["tokenize"]:
        assert llm.detokenize(case["ids"]).decode("utf-8", "replace") == case["detokenize"], case["text"]
        assert llm.detokenize(case["ids"], special=True).decode("utf-8", "replace") == case["detokenize_special"]


def _serve(model_path, extra):
    p = subprocess.Popen([cli_path(), "serve", "-m", model_path, "--port", "0", "-t", "2", "--parallel", "1",
                          "-c", "2048", "--log-requests", "0", *extra], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    port = None
    while time.time() < deadline and port is None:
        line = p.stderr.readline()
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        p.kill()
        pytest.fail("the server did not start")
    return p, port


def _post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_same_text_as_the_server(qwen_path, gemma_path):
    """One engine: the library's answers are the server's, for completions and chats."""
    for path, extra, chat in [(qwen_path, [], True), (gemma_path, ["--chat-template-file", GEMMA_TEMPLATE], True)]:
        server, port = _serve(path, extra)
        try:
            llm = Llama(path, n_ctx=2048, n_threads=2, verbose=False,
                        chat_template=open(GEMMA_TEMPLATE).read() if extra else None)
            body = {"prompt": "The three laws of robotics are", "max_tokens": 24, "temperature": 0}
            want = _post(port, "/v1/completions", body)["choices"][0]["text"]
            got = llm.create_completion(body["prompt"], max_tokens=24, temperature=0.0)["choices"][0]["text"]
            assert got == want
            if chat:
                msgs = [{"role": "user", "content": "Write a haiku about the sea."}]
                want = _post(port, "/v1/chat/completions", {"messages": msgs, "max_tokens": 24, "temperature": 0})
                got = llm.create_chat_completion(msgs, max_tokens=24, temperature=0.0)
                assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
            llm.close()
        finally:
            server.terminate()
            server.wait(30)
