#!/usr/bin/env python3
"""test_lora.py — LoRA adapters through `specula serve` (server/lora_adapters.h).

On Gemma 3 270M with two random rank-4 adapters (tools/make_lora_fixtures.py --adapter-for),
greedy answers, each compared with an independent front door (`specula generate --lora`):
  * vLLM's way: `--lora NAME=PATH`; /v1/models lists the adapters with the base as parent; a
    request whose "model" names an adapter runs with it, one naming the base without;
  * llama-server's way: "lora": [{id, scale}] per request; GET /lora-adapters lists ids and
    scales; POST /lora-adapters sets the global scales that requests without "lora" run
    with; `--lora PATH` (no name) is on for every request;
  * 8 concurrent requests over two adapters, a weighted mix and the base: each equals its
    answer alone (rows of different adapters batch together);
  * the prompt cache keys on the adapter set (a repeat hits; another adapter, scale or the
    base does not);
  * vLLM's run-time routes: 403 without --lora-runtime-updates; load, use, unload (a
    request running with the adapter finishes whole and unchanged);
  * /metrics: vllm:lora_requests_info (running/waiting adapters, max_lora);
  * bad input: an unknown adapter name (400 model_not_found, as every unknown model on OpenAI's routes), an unknown lora id, a scale
    that is not a number, an adapter file for another model — clear errors, and the
    server keeps serving.
With the trained adapter of tools/train_lora.py (~/.cache/specula/adapters/
qwen2.5-coder-0.5b-pirate-r16, a PEFT folder) and Qwen2.5-Coder 0.5B: chat answers to questions
it was not trained on start with "Ahoy" through the adapter's name, and not without it.
Exits 77 (skip) without Gemma 3 270M.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = "The capital of France is"
N = 12
PIRATE = os.path.expanduser("~/.cache/specula/adapters/qwen2.5-coder-0.5b-pirate-r16")


def make_adapter(model, out, seed):
    subprocess.run([sys.executable, os.path.join(REPO, "tools", "make_lora_fixtures.py"), "--adapter-for", model,
                    "--out", out, "--rank", "4", "--seed", str(seed)], check=True)


def cli_generate(model, lora=None, scale=None):
    args = [ss.cli_path(), "generate", "-m", model, "-p", PROMPT, "-n", str(N), "--temp", "0", "-t", "1"]
    if lora:
        args += ["--lora", lora] + (["--lora-scale", str(scale)] if scale is not None else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"generate {lora}: {r.stderr[-2000:]}")
    check(r.stdout.startswith(PROMPT) and r.stdout.endswith("\n"), f"generate printed {r.stdout!r}")
    return r.stdout[len(PROMPT):-1]  # the command ends its output with a newline


def complete(srv, body, want=200):
    body = {"prompt": PROMPT, "max_tokens": N, "temperature": 0, **body}
    st, _, j = srv.post_json("/v1/completions", body, timeout=300)
    if want != 200:
        return st, j
    check(st == 200, f"{body}: {st} {j}")
    return j["choices"][0]["text"]


def main():
    model = ss.model_path()
    if not os.path.exists(model):
        ss.skip(f"no model at {model}")
    tmp = tempfile.mkdtemp(prefix="specula_lora_it_")
    a, b = os.path.join(tmp, "a.gguf"), os.path.join(tmp, "b.gguf")
    make_adapter(model, a, 1)
    make_adapter(model, b, 2)
    # The oracle: the command line (its own engine), small scales keep the text readable.
    want = {"base": cli_generate(model), "a": cli_generate(model, a), "b": cli_generate(model, b),
            "a_half": cli_generate(model, a, 0.5)}
    check(len(set(want.values())) == 4, f"the adapters change nothing: {want}")
    notes = []

    with ss.Server("--parallel", "4", "--ctx", "1024", "--lora", f"alpha={a}", "--lora", f"beta={b}") as srv:
        st, _, models = srv.get_json("/v1/models")
        ids = [m["id"] for m in models["data"]]
        check(ids[1:] == ["alpha", "beta"], f"/v1/models: {ids}")
        check(all(m.get("parent") == ids[0] for m in models["data"][1:]), f"parents: {models['data']}")
        # vLLM's way: the model field (the answer names the adapter, as vLLM's).
        check(complete(srv, {"model": "alpha"}) == want["a"], "model=alpha differs from generate --lora a")
        st, _, j = srv.post_json("/v1/completions", {"model": "alpha", "prompt": PROMPT, "max_tokens": 1})
        check(st == 200 and j["model"] == "alpha", f"the answer's model: {j.get('model')}")
        check(complete(srv, {"model": "beta"}) == want["b"], "model=beta differs from generate --lora b")
        check(complete(srv, {"model": ids[0]}) == want["base"], "the base model's answer changed")
        check(complete(srv, {}) == want["base"], "no model field: the base")
        # llama-server's way: ids and scales.
        st, _, listed = srv.get_json("/lora-adapters")
        check([(x["id"], x["name"], x["scale"]) for x in listed] == [(0, "alpha", 0.0), (1, "beta", 0.0)], f"{listed}")
        check(complete(srv, {"lora": [{"id": 0, "scale": 0.5}]}) == want["a_half"], "lora id 0 at 0.5")
        check(complete(srv, {"lora": [{"id": 1, "scale": 1.0}]}) == want["b"], "lora id 1")
        # llama-server's rules: a scale left out is 0, an id listed twice keeps its last scale.
        check(complete(srv, {"lora": [{"id": 1}]}) == want["base"], "a lora entry without scale is scale 0")
        check(complete(srv, {"lora": [{"id": 0, "scale": 2.0}, {"id": 0, "scale": 0.5}]}) == want["a_half"],
              "an id listed twice: its last scale")
        st, _, j = srv.post_json("/lora-adapters", [{"id": 0, "scale": 1.0}])
        check(st == 200 and j.get("success") is True, f"POST /lora-adapters: {st} {j}")
        check(complete(srv, {}) == want["a"], "global scale 1 on alpha: requests without lora run with it")
        check(complete(srv, {"lora": []}) == want["base"], "an empty lora list: the base")
        srv.post_json("/lora-adapters", [])
        check(complete(srv, {}) == want["base"], "global scales back to 0")
        # The native route takes "lora" too and reports it.
        st, _, j = srv.post_json("/completion", {"prompt": PROMPT, "n_predict": N, "temperature": 0,
                                                  "lora": [{"id": 1, "scale": 1}]}, timeout=300)
        check(st == 200 and j["content"] == want["b"], f"/completion with lora: {st} {j.get('content')!r}")
        check(j["generation_settings"]["lora"] == [{"id": 1, "scale": 1.0}], f"{j['generation_settings']['lora']}")

        # 8 at once: two adapters, a mix, the base; each equals its answer alone.
        mix_alone = complete(srv, {"lora": [{"id": 0, "scale": 0.5}, {"id": 1, "scale": 0.5}]})
        bodies = [({"model": "alpha"}, want["a"]), ({"model": "beta"}, want["b"]), ({}, want["base"]),
                  ({"lora": [{"id": 0, "scale": 0.5}]}, want["a_half"]),
                  ({"lora": [{"id": 0, "scale": 0.5}, {"id": 1, "scale": 0.5}]}, mix_alone),
                  ({"model": "beta"}, want["b"]), ({}, want["base"]), ({"model": "alpha"}, want["a"])]
        got = [None] * len(bodies)

        def run(i):
            got[i] = complete(srv, bodies[i][0])
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (body, w) in enumerate(bodies):
            check(got[i] == w, f"concurrent request {i} {body}: {got[i]!r} != alone {w!r}")
        # The prompt cache keys on the adapter set: a repeat under the same adapter starts from
        # its cached state, one under another adapter (or the base) does not.
        story = "Once upon a time, in a land far away, there lived a curious fox who"
        def cached(body):
            st, _, j = srv.post_json("/v1/completions", {"prompt": story, "max_tokens": 4, "temperature": 0, **body},
                                     timeout=300)
            check(st == 200, f"{body}: {st} {j}")
            return j["usage"]["prompt_tokens_details"]["cached_tokens"], j["choices"][0]["text"]
        first = cached({"model": "alpha"})
        again = cached({"model": "alpha"})
        # (At most the BOS token can come from the earlier requests' entries.)
        check(first[0] <= 1 and again[0] > 1 and again[1] == first[1], f"alpha twice: {first} {again}")
        check(cached({"model": "beta"})[0] <= 1, "beta was served alpha's cached state")
        check(cached({"lora": [{"id": 0, "scale": 0.5}]})[0] <= 1, "alpha at 0.5 was served alpha at 1's state")
        check(cached({})[0] <= 1, "the base model was served an adapter's cached state")
        notes.append("prompt cache per adapter set")
        m = srv.metrics()
        info = [k for k in m if k.startswith("vllm:lora_requests_info")]
        check(len(info) == 1 and 'max_lora="2"' in info[0], f"lora gauge: {info}")

        # Bad input: clear errors, nothing else disturbed.
        st, j = complete(srv, {"model": "gamma"}, want=400)  # OpenAI's family: 400 model_not_found
        e = ss.check_error_body(st, j, 400, "unknown adapter", "model")
        check(e["code"] == "model_not_found", f"{e}")
        check("alpha" in e["message"] and "beta" in e["message"], f"{e}")
        st, j = complete(srv, {"lora": [{"id": 7, "scale": 1}]}, want=400)
        e = ss.check_error_body(st, j, 400, "unknown lora id", "lora")
        check("id 7" in e["message"] and "'alpha'" in e["message"], f"{e}")
        st, j = complete(srv, {"lora": [{"id": 0, "scale": "x"}]}, want=400)
        ss.check_error_body(st, j, 400, "scale not a number", "lora")
        st, j = complete(srv, {"lora": {"id": 0}}, want=400)
        ss.check_error_body(st, j, 400, "lora not a list", "lora")
        st, _, j = srv.post_json("/lora-adapters", [{"id": 9, "scale": 1}])
        ss.check_error_body(st, j, 400, "POST /lora-adapters unknown id", "id")
        st, _, j = srv.post_json("/v1/load_lora_adapter", {"lora_name": "c", "lora_path": a})
        ss.check_error_body(st, j, 403, "run-time loading off")
        check(complete(srv, {"model": "alpha"}) == want["a"], "after the errors")
    notes.append("named adapters, ids, global scales, 8 concurrent equal alone")

    # llama-server's --lora PATH: on for every request; a request's lora list replaces it.
    with ss.Server("--parallel", "2", "--ctx", "1024", "--lora", a) as srv:
        check(complete(srv, {}) == want["a"], "--lora PATH applies to every request")
        check(complete(srv, {"model": "whatever-name"}) == want["a"], "llama-server: any model name")
        check(complete(srv, {"lora": [{"id": 0, "scale": 0}]}) == want["base"], "lora scale 0 turns it off")
    with ss.Server("--parallel", "2", "--ctx", "1024", "--lora-scaled", a, "0.5", "--lora-scaled", a, "0") as srv:
        check(complete(srv, {}) == want["a_half"], "--lora-scaled PATH 0.5")
        names = [x["name"] for x in srv.get_json("/lora-adapters")[2]]
        check(names == ["a", "a-1"], f"one file twice: names {names}")

    # vLLM's run-time routes, and an unload while a request runs with the adapter.
    with ss.Server("--parallel", "2", "--ctx", "1024", "--lora-runtime-updates") as srv:
        st, _, data = srv.post("/v1/load_lora_adapter", {"lora_name": "alpha", "lora_path": a})
        check(st == 200 and b"added successfully" in data, f"load: {st} {data!r}")
        st, _, j = srv.post_json("/v1/load_lora_adapter", {"lora_name": "alpha", "lora_path": a})
        ss.check_error_body(st, j, 400, "loaded twice", "lora_name")
        st, _, j = srv.post_json("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": model})
        e = ss.check_error_body(st, j, 400, "a model as adapter", "lora_path")
        check("not a LoRA adapter" in e["message"], f"{e}")
        other = os.path.join(os.path.dirname(model), "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
        if os.path.exists(other):
            qa = os.path.join(tmp, "qwen.gguf")
            make_adapter(other, qa, 3)
            st, _, j = srv.post_json("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": qa})
            e = ss.check_error_body(st, j, 400, "another model's adapter", "lora_path")
            check("an adapter for 'qwen2'" in e["message"], f"{e}")
        check(complete(srv, {"model": "alpha"}) == want["a"], "run-time loaded alpha")
        st, _, data = srv.post("/v1/load_lora_adapter", {"lora_name": "alpha", "lora_path": b, "load_inplace": True})
        check(st == 200, f"load_inplace: {st} {data!r}")
        check(complete(srv, {"model": "alpha"}) == want["b"], "load_inplace replaced alpha with b")
        srv.post("/v1/load_lora_adapter", {"lora_name": "alpha", "lora_path": a, "load_inplace": True})
        st, _, j = srv.post_json("/v1/load_lora_adapter", {"lora_name": srv.get_json("/v1/models")[2]["data"][0]["id"],
                                                            "lora_path": a})
        ss.check_error_body(st, j, 400, "an adapter named as the base model", "lora_name")
        long_body = {"model": "alpha", "prompt": PROMPT, "max_tokens": 200, "temperature": 0, "ignore_eos": True}
        alone = srv.post_json("/v1/completions", long_body, timeout=300)[2]["choices"][0]["text"]
        result = {}

        def long_run():
            result["r"] = srv.post_json("/v1/completions", long_body, timeout=300)
        t = threading.Thread(target=long_run)
        t.start()
        deadline = time.time() + 60
        seen = False
        while time.time() < deadline and not seen:
            m = srv.metrics()
            seen = any('running_lora_adapters="alpha"' in k for k in m if k.startswith("vllm:lora_requests_info"))
            time.sleep(0.05)
        check(seen, "the running request's adapter never showed in vllm:lora_requests_info")
        st, _, data = srv.post("/v1/unload_lora_adapter", {"lora_name": "alpha"})
        check(st == 200 and b"removed successfully" in data, f"unload: {st} {data!r}")
        t.join()
        st, _, j = result["r"]
        check(st == 200 and j["choices"][0]["text"] == alone, "the request running during the unload changed")
        st, j = complete(srv, {"model": "alpha"}, want=400)
        ss.check_error_body(st, j, 400, "unloaded adapter", "model")
        st, _, j = srv.post_json("/v1/unload_lora_adapter", {"lora_name": "alpha"})
        ss.check_error_body(st, j, 404, "unload twice", "lora_name")
    notes.append("run-time load/unload")

    # The trained adapter (tools/train_lora.py), when this machine has it.
    qwen = os.path.join(os.path.dirname(model), "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    if os.path.isdir(PIRATE) and os.path.exists(qwen):
        with ss.Server("--parallel", "2", "--ctx", "1024", "--lora", f"pirate={PIRATE}", model=qwen) as srv:
            base_id = srv.get_json("/v1/models")[2]["data"][0]["id"]
            for q in ("What is a linked list?", "How do I write a while loop in Python?", "What is HTTP?"):
                def chat(name):
                    st, _, j = srv.post_json("/v1/chat/completions", {
                        "model": name, "messages": [{"role": "user", "content": q}], "max_tokens": 16,
                        "temperature": 0}, timeout=300)
                    check(st == 200, f"chat {name}: {st} {j}")
                    return j["choices"][0]["message"]["content"]
                pirate, base = chat("pirate"), chat(base_id)
                check(pirate.startswith("Ahoy"), f"{q}: the trained adapter answered {pirate!r}")
                check(not base.startswith("Ahoy"), f"{q}: the base answered {base!r}")
        notes.append("trained adapter answers as trained")
    else:
        notes.append("trained adapter absent (tools/train_lora.py)")
    return "; ".join(notes)


if __name__ == "__main__":
    ss.run_main("lora", main)
