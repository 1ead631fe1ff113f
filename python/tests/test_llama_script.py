"""A program written against llama-cpp-python (llama_cpp_script.py: completion, chat,
streaming, tools, a json_schema response, embeddings) runs with only its import changed to
`from specula import Llama`, and answers as llama-cpp-python did on the same GGUF."""
import json
import math
import os
import subprocess
import sys

from conftest import first_difference

HERE = os.path.dirname(os.path.abspath(__file__))


def test_script_with_only_the_import_changed(qwen_path, reference, tmp_path):
    src = open(os.path.join(HERE, "llama_cpp_script.py")).read()
    assert src.count("from llama_cpp import Llama") == 1
    script = tmp_path / "script.py"
    script.write_text(src.replace("from llama_cpp import Llama", "from specula import Llama"))
    r = subprocess.run([sys.executable, str(script), qwen_path], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    want = reference["models"]["qwen25_coder_05b"]["script"]

    assert got["tokenize"] == want["tokenize"]
    assert got["token_eos"] == want["token_eos"]
    assert got["n_ctx"] == want["n_ctx"]
    # Greedy texts: equal (the completion prompts' near ties are checked in test_llama_oracle).
    for k in ("completion", "chat"):
        assert first_difference(got[k], want[k]) == -1, (k, got[k], want[k])
    assert got["completion_finish"] == want["completion_finish"]
    assert got["completion_usage"] == want["completion_usage"]
    assert got["chat_stream"] == got["chat"] == want["chat_stream"]
    assert got["chat_role"] == "assistant"
    assert got["tool_name"] == "get_weather" == want["tool_name"]
    assert isinstance(got["tool_arguments"].get("city"), str)
    # The schema's required keys with their types (extra keys are valid JSON Schema: llama.cpp's
    # grammar leaves them out, llguidance allows them).
    assert {"age", "name"} <= set(got["json_keys"]) and got["json_types"] == ["str", "int"]
    assert got["embed_dims"] == want["embed_dims"]
    # Unnormalised mean-pooled embeddings, as llama.cpp's: the same direction and length.
    a, b = got["embed_head"], want["embed_head"]
    cos = sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    assert cos > 0.99, (a, b)
    assert abs(got["embed_norm"] - want["embed_norm"]) / want["embed_norm"] < 0.02
