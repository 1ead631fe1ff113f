"""tests/integration/test_embeddings.py — `specula serve`'s POST /v1/embeddings against
llama.cpp's embeddings of the same model (tests/fixtures/embeddings/gemma3_270m.json, made
by tools/make_embedding_fixtures.py with llama-cpp-python):
- tiny random-weight Qwen3.5 models (f32 and f16 weights, regenerated at test time from
  their seeds by tools/make_qwen35_fixtures.py): cosine >= 0.99999 for mean and last
  pooling (the same computation; f16 weights: llama.cpp rounds activations to f16);
- Gemma 3 270M Q4_K_M, 5 texts: cosine >= 0.997 (measured 0.9972-0.9999: the engines
  quantize activations differently in the Q4_K/Q6_K products; the same model dequantized
  to f32 gives 1.000000), the same token counts;
one and several inputs, token-id inputs, base64 encoding (little-endian float32), unit
norm; refusals naming the field; generation keeps running while embeddings are computed
(they share the engine thread).
Exit 0 pass, 1 fail, 77 skip (no model).
"""

import base64
import json
import math
import os
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def tiny(fx, worst):
    import subprocess
    import tempfile
    tools = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "make_qwen35_fixtures.py")
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, tools, "--models-only", "--check", "--out", tmp], capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            if "No module named" in r.stderr:
                ss.skip("the gguf/numpy packages are missing (scripts/test installs them)")
            raise ss.TestFailure(f"make_qwen35_fixtures failed: {r.stderr[-400:]}")
        for name, entry in fx["tiny"].items():
            with ss.Server("--parallel", "1", "--ctx", "256", model=os.path.join(tmp, f"qwen35_{name}.gguf")) as srv:
                for pooling, want in entry["pooling"].items():
                    st, _, data = srv.post("/v1/embeddings", {"input": entry["inputs"], "pooling": pooling})
                    check(st == 200, f"{name} {pooling}: {st} {data[:200]!r}")
                    cos = [cosine(d["embedding"], w) for d, w in zip(json.loads(data)["data"], want)]
                    worst[f"{name} {pooling}"] = min(cos)
                    check(min(cos) >= 0.99999, f"{name} {pooling}: cosine vs llama.cpp {cos}")


def main():
    ss.require_model()
    fx = json.load(open(os.path.join(ss.fixtures_dir(), "embeddings", "gemma3_270m.json")))
    if os.path.basename(ss.model_path()) != fx["model_file"]:
        ss.skip(f"the fixture is for {fx['model_file']}")
    texts = fx["texts"]
    worst = {}
    tiny(fx, worst)
    with ss.Server("--parallel", "2", "--ctx", "1024") as srv:
        for pooling, want in fx["pooling"].items():
            st, _, data = srv.post("/v1/embeddings", {"input": texts, "pooling": pooling})
            check(st == 200, f"{pooling}: {st} {data[:200]!r}")
            o = json.loads(data)
            check(o["object"] == "list" and [d["index"] for d in o["data"]] == list(range(len(texts))), f"{o.keys()}")
            check(o["usage"]["prompt_tokens"] == sum(fx["n_tokens"]), f"usage {o['usage']} vs {fx['n_tokens']}")
            cos = [cosine(d["embedding"], w) for d, w in zip(o["data"], want)]
            if pooling == "mean":
                batch_mean = [d["embedding"] for d in o["data"]]
            worst[f"gemma {pooling}"] = min(cos)
            check(min(cos) >= 0.997, f"{pooling}: cosine vs llama.cpp {cos}")
            for d in o["data"]:
                n = math.sqrt(sum(x * x for x in d["embedding"]))
                check(abs(n - 1) < 1e-4, f"norm {n}")
        # One input, alone: the same vector as in the batch (mean is the default pooling).
        st, _, data = srv.post("/v1/embeddings", {"input": texts[1], "model": json.loads(srv.request("GET", "/v1/models")[2])["data"][0]["id"]})
        one = json.loads(data)["data"][0]["embedding"]
        check(cosine(one, batch_mean[1]) > 0.9999999, "single input differs from the same input in a batch")
        # Token ids, and base64.
        ids = ss.tokenize(texts[0], parse_special=False)
        st, _, data = srv.post("/v1/embeddings", {"input": ids, "encoding_format": "base64"})
        raw = base64.b64decode(json.loads(data)["data"][0]["embedding"])
        vec = struct.unpack(f"<{len(raw) // 4}f", raw)
        check(cosine(vec, batch_mean[0]) > 0.9999999, "token-id input with base64")
        # Refusals.
        for body, param in (({}, "input"), ({"input": []}, "input"), ({"input": 5}, "input"),
                            ({"input": "x", "dimensions": 0}, "dimensions"), ({"input": "x", "dimensions": 10 ** 6}, "dimensions"),
                            ({"input": "x", "pooling": "cls"}, "pooling"),
                            ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
                            ({"input": [[1, -1]]}, "input"),
                            ({"input": "word " * 1100}, "input")):
            st, _, data = srv.post("/v1/embeddings", body)
            ss.check_error_body(st, data, 400, f"embeddings {str(body)[:60]}", param)
        # Any model name is answered by the one served model (as llama-server does), under its own id.
        st, _, j = srv.post_json("/v1/embeddings", {"input": "x", "model": "other"})
        check(st == 200 and j["model"] == "gemma-3-270m-q4_k_m", f"embeddings under another model name: {st} {str(j)[:200]}")
        # A stream keeps going while embeddings run.
        out = {}
        t = threading.Thread(target=lambda: out.update(r=srv.stream("/v1/completions", {
            "prompt": "Once", "max_tokens": 40, "ignore_eos": True, "temperature": 0, "stream": True})))
        t.start()
        for _ in range(5):
            st, _, _ = srv.post("/v1/embeddings", {"input": texts})
            check(st == 200, "embeddings beside a stream")
        t.join(120)
        check(out["r"][0] == 200 and out["r"][3][-1] == "[DONE]", "the stream beside embeddings")
    return "min cosine vs llama.cpp: " + ", ".join(f"{k} {v:.7f}" for k, v in worst.items())


if __name__ == "__main__":
    ss.run_main("test_embeddings", main)
