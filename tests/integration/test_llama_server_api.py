#!/usr/bin/env python3
"""llama-server's own API on `specula serve` (server/llama_api.h): the native /completion
object and stream, n_probs / return_tokens / response_fields, /props, /slots, /models,
/infill (Qwen2.5-Coder's FIM tokens, when that model is in the cache), CORS preflight and
headers, any model name answered with the served id, llama-server's context-overflow error
fields, the chat stream's role-only first chunk, the server's request defaults (--temp,
--seed, -n), --no-slots, and the chat page at /.

Shapes are llama-server's (tools/server/server-task.cpp to_json_non_oaicompat in the
llama.cpp source the llama-cpp-python sdist vendors); the whole suite of llama.cpp's server
tests runs against specula with tests/compat/run_llama_server_suite.sh."""
import http.client
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402

check = ss.check


def raw_events(data):
    """`data:` payloads of a stream that has no [DONE] (llama-server's native stream)."""
    text = data.decode("utf-8")
    check(text.endswith("\n\n"), f"stream does not end with a blank line: {text[-100:]!r}")
    out = []
    for ev in text[:-2].split("\n\n"):
        check(ev.startswith("data: "), f"bad event framing: {ev[:200]!r}")
        out.append(json.loads(ev[len("data: "):]))
    return out


def test_native_completion(srv, stats):
    st, _, body = srv.post_json("/completion", {"prompt": "The capital of France is", "n_predict": 6,
                                                "temperature": 0, "return_tokens": True, "n_probs": 3})
    check(st == 200, f"/completion: {st} {body}")
    for key in ("content", "tokens", "stop", "stop_type", "stopping_word", "truncated", "tokens_predicted",
                "tokens_evaluated", "generation_settings", "timings", "prompt", "has_new_line", "model",
                "tokens_cached", "completion_probabilities"):
        check(key in body, f"/completion lacks '{key}': {sorted(body)}")
    check(body["stop"] is True and body["stop_type"] in ("limit", "eos", "word"), f"stop fields {body['stop_type']}")
    check(len(body["tokens"]) == body["tokens_predicted"] or body["stop_type"] == "eos",
          f"tokens {body['tokens']} vs tokens_predicted {body['tokens_predicted']}")
    check(all(isinstance(t, int) for t in body["tokens"]), "tokens are ids")
    probs = body["completion_probabilities"]
    check(len(probs) >= 1 and len(probs[0]["top_logprobs"]) == 3 and probs[0]["logprob"] <= 0
          and isinstance(probs[0]["id"], int) and isinstance(probs[0]["bytes"], list), f"n_probs entry {probs[:1]}")
    # Greedy: the first token is the most likely alternative.
    check(probs[0]["id"] == probs[0]["top_logprobs"][0]["id"], f"greedy token is not the top one: {probs[0]}")
    t = body["timings"]
    for key in ("cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
                "predicted_ms", "predicted_per_token_ms", "predicted_per_second"):
        check(key in t, f"timings lacks {key}: {t}")
    gs = body["generation_settings"]
    check(gs["n_predict"] == 6 and gs["temperature"] == 0 and gs["n_probs"] == 3, f"generation_settings {gs}")
    # The same request streamed: chunks of content, then the whole object with stop true.
    st, _, data = srv.post("/completion", {"prompt": "The capital of France is", "n_predict": 6, "temperature": 0,
                                           "stream": True, "return_tokens": True})
    check(st == 200, f"streamed /completion: {st}")
    events = raw_events(data)
    check(all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True, "stop flags of the stream")
    streamed = "".join(e["content"] for e in events)
    check(streamed == body["content"], f"stream {streamed!r} != whole {body['content']!r}")
    check(sum(len(e["tokens"]) for e in events) == len(body["tokens"]), "streamed token ids")
    check(events[-1]["timings"]["predicted_n"] == body["timings"]["predicted_n"], "stream's last timings")
    # response_fields: only those, under their paths.
    st, _, sel = srv.post_json("/completion", {"prompt": "Hi", "n_predict": 2, "response_fields":
                                               ["content", "generation_settings/n_predict"]})
    check(st == 200 and sorted(sel) == ["content", "generation_settings/n_predict"]
          and sel["generation_settings/n_predict"] == 2, f"response_fields: {sel}")
    # Several prompts: an array of objects; mixed text and ids; llama-server's prompt_string.
    st, _, arr = srv.post_json("/completion", {"prompt": ["Hi", "Hello"], "n_predict": 2, "temperature": 0})
    check(st == 200 and isinstance(arr, list) and len(arr) == 2 and [a["index"] for a in arr] == [0, 1],
          f"two prompts: {str(arr)[:300]}")
    ids = ss.tokenize("Hello", parse_special=False)
    st, _, mixed = srv.post_json("/completion", {"prompt": ["Hello", ids[-1]], "n_predict": 1})
    check(st == 200 and mixed["tokens_evaluated"] == len(ids) + 1, f"mixed prompt: {st} {str(mixed)[:200]}")
    st, _, ps = srv.post_json("/completion", {"prompt": {"prompt_string": "Hello"}, "n_predict": 1})
    check(st == 200 and "content" in ps, f"prompt_string: {st} {str(ps)[:200]}")
    st, _, e = srv.post_json("/completion", {"prompt": {"prompt_string": "Hi", "multimodal_data": ["AA=="]},
                                             "n_predict": 1})
    check(st == 400, f"multimodal_data on a text model: {st}")
    # /completions is the same route in llama-server (its OpenAI one is /v1/completions).
    st, _, b2 = srv.post_json("/completions", {"prompt": "Hi", "n_predict": 1})
    check(st == 200 and "content" in b2, f"/completions: {st}")
    stats["native"] = "native /completion ok"


def test_openai_extras(srv, stats):
    # Any model name is answered; the answer names the served model.
    st, _, body = srv.post_json("/v1/chat/completions", {"model": "gpt-4o", "max_tokens": 2,
                                                        "messages": [{"role": "user", "content": "Hi"}]})
    check(st == 200 and body["model"] == srv.model_id and body["system_fingerprint"], f"model name: {st} {body}")
    st, _, body = srv.post_json("/v1/embeddings", {"model": "text-embedding-3-small", "input": "hi"})
    check(st == 200 and body["model"] == srv.model_id, f"embeddings model name: {st}")
    # The chat stream: a role-only first chunk (content null), never an empty content delta.
    st, _, raw, events = srv.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                            "max_tokens": 4, "stream": True})
    objs = [json.loads(e) for e in events[:-1]]
    first = objs[0]["choices"][0]["delta"]
    check(first == {"role": "assistant", "content": None}, f"first chunk delta {first}")
    check(all(o["choices"][0]["delta"].get("content") != "" for o in objs), "an empty content delta")
    check("timings" in objs[-1], f"no timings on the last chunk: {objs[-1]}")
    # llama-server's context overflow: its type and the counts, OpenAI's code.
    st, _, body = srv.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 3000}]})
    err = body.get("error", {})
    check(st == 400 and err.get("type") == "exceed_context_size_error" and err.get("code") == "context_length_exceeded"
          and err.get("n_prompt_tokens", 0) > err.get("n_ctx", 1) > 0, f"context overflow: {st} {err}")
    # Fields llama-server accepts: n_probs on chat (logprobs), string logit_bias keys, template kwargs.
    st, _, body = srv.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                        "max_tokens": 2, "n_probs": 2, "verbose": True,
                                                        "chat_template_kwargs": {"enable_thinking": False},
                                                        "logit_bias": {"Hello": -100}})
    check(st == 200 and body["choices"][0]["logprobs"] is not None, f"llama-server fields: {st} {str(body)[:300]}")
    st, _, body = srv.post_json("/v1/completions", {"prompt": "x", "max_tokens": 1, "samplers": ["top_k"]})
    check(st == 400 and "samplers" in body["error"]["message"], f"samplers refused with its reason: {st} {body}")
    # continue_final_message: the prompt ends inside the assistant's text.
    st, _, tpl = srv.post_json("/apply-template", {"messages": [{"role": "user", "content": "Count"},
                                                                {"role": "assistant", "content": "1, 2,"}],
                                                   "continue_final_message": True})
    check(st == 200 and tpl["prompt"].endswith("1, 2,"), f"continue_final_message: {st} {tpl}")
    stats["openai"] = "extras ok"


def test_side_routes(srv, stats):
    st, _, props = srv.get_json("/props")
    check(st == 200 and props["total_slots"] == 2 and props["model_path"].endswith(".gguf")
          and props["default_generation_settings"]["n_ctx"] > 0, f"/props: {st} {str(props)[:300]}")
    check(props["default_generation_settings"]["params"]["seed"] == 1234
          and abs(props["default_generation_settings"]["params"]["temperature"] - 0.5) < 1e-6, "server defaults in /props")
    st, _, slots = srv.get_json("/slots")
    check(st == 200 and len(slots) == 2 and all("is_processing" in s for s in slots), f"/slots: {slots}")
    st, _, models = srv.get_json("/models")
    check(st == 200 and models["data"][0]["id"] == srv.model_id, f"/models: {models}")
    st, _, body = srv.post_json("/rerank", {"query": "a", "documents": ["b"]})
    check(st == 501 and "rerank" in body["error"]["message"], f"/rerank: {st} {body}")
    st, _, body = srv.get_json("/v1/health")
    check(st == 200, "/v1/health")
    # Server defaults: --seed and --temp apply to requests that leave them out, -n caps them.
    a = srv.post_json("/completion", {"prompt": "Once upon a time"})[2]
    b = srv.post_json("/completion", {"prompt": "Once upon a time"})[2]
    check(a["content"] == b["content"] and a["generation_settings"]["seed"] == 1234
          and a["tokens_predicted"] <= 5 and a["generation_settings"]["n_predict"] == 5, f"defaults: {a['generation_settings']}")
    # CORS: a preflight without the key (none is set here, but the route must not run).
    st, headers, _ = srv.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://example.com", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "Authorization, Content-Type"})
    check(st == 200 and headers.get("access-control-allow-origin") == "http://example.com"
          and "POST" in headers.get("access-control-allow-methods", "")
          and "Authorization" in headers.get("access-control-allow-headers", ""), f"preflight: {st} {headers}")
    st, headers, _ = srv.request("GET", "/v1/models", headers={"Origin": "http://example.com"})
    check(headers.get("access-control-allow-origin") == "http://example.com", f"CORS on GET: {headers}")
    # The chat page.
    st, headers, page = srv.request("GET", "/")
    check(st == 200 and headers.get("content-type", "").startswith("text/html") and b'id="send"' in page
          and "content-security-policy" in headers, f"chat page: {st} {headers}")
    stats["routes"] = "props/slots/models/rerank/CORS/page ok"


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_switches(stats):
    hosts = "127.0.0.1,::1" if ipv6_loopback() else "127.0.0.1"
    with ss.Server("--parallel", "1", "--no-slots", "--no-webui", "--cors-origin", "localhost",
                   "--alias", "zeta, alpha", "--tags", "chat,small", "--host", hosts, "-n", "5000",
                   "--chat-template-file", ss.gemma_template()) as srv:
        # --alias a,b: every name listed, the id the first in byte order; --tags listed.
        st, _, models = srv.get_json("/models")
        m = models["data"][0]
        check(m["id"] == "alpha" and m["aliases"] == ["zeta", "alpha"] and m["tags"] == ["chat", "small"],
              f"--alias/--tags: {m}")
        # A prefill the template trims (Gemma's `| trim`): as llama-server, the conversation
        # before it, the generation prompt, then the text as sent.
        st, _, tpl = srv.post_json("/apply-template", {"messages": [{"role": "user", "content": "Count"},
                                                                    {"role": "assistant", "content": "1, 2, "}]})
        check(st == 200 and tpl["prompt"].endswith("<start_of_turn>model\n1, 2, "), f"a trimmed prefill: {st} {tpl}")
        # -n beyond what the prompt leaves of the context: refused as llama-server refuses it
        # (its ctx-shift is off by default), the error naming the server's default.
        st, _, body = srv.post_json("/v1/completions", {"prompt": "Number:", "regex": "[0-9]{3}"})
        check(st == 400 and "--n-predict" in body["error"]["message"], f"-n 5000 with a 4096-token context: {st} {body}")
        st, _, body = srv.post_json("/v1/completions", {"prompt": "Number:", "regex": "[0-9]{3}", "max_tokens": 8})
        check(st == 200 and len(body["choices"][0]["text"]) == 3, f"max_tokens given: {st} {body}")
        if "," in hosts:  # --host with two addresses: both answer
            conn = http.client.HTTPConnection("::1", srv.port, timeout=10)
            conn.request("GET", "/health")
            check(conn.getresponse().status == 200, "the second --host address does not answer")
            conn.close()
        st, _, body = srv.get_json("/slots")
        check(st == 501, f"--no-slots: {st}")
        st, _, _ = srv.request("GET", "/")
        check(st == 404, f"--no-webui: {st}")
        _, h1, _ = srv.request("GET", "/health", headers={"Origin": "http://localhost:5173"})
        _, h2, _ = srv.request("GET", "/health", headers={"Origin": "http://example.com"})
        check(h1.get("access-control-allow-origin") == "http://localhost:5173"
              and "access-control-allow-origin" not in h2, f"--cors-origin localhost: {h1} {h2}")
    stats["switches"] = "switches ok"


def test_reasoning_vertex_verbose(stats):
    """--reasoning off closes a thinking block the template opens; --verbose; Vertex AI's
    /predict (AIP_MODE=PREDICTION); input_tokens; the prefill of a last assistant message;
    llama-server's metrics."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<end_of_turn>\n{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}")
        template = f.name
    os.environ["AIP_MODE"] = "PREDICTION"
    try:
        with ss.Server("--parallel", "2", "--reasoning", "off", "--verbose", "--chat-template-file", template) as srv:
            st, _, tpl = srv.post_json("/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
            check(st == 200 and tpl["prompt"].endswith("<|assistant|><think>\n</think>"), f"--reasoning off: {tpl}")
            msgs = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2,"}]
            st, _, body = srv.post_json("/v1/chat/completions", {"messages": msgs, "max_tokens": 2})
            check(st == 200 and body["__verbose"]["prompt"].endswith("<|assistant|>1, 2,"),
                  f"prefill with --verbose: {st} {str(body)[:400]}")
            st, _, body = srv.post_json("/v1/chat/completions", {"messages": msgs + msgs[1:], "max_tokens": 2})
            check(st == 400, f"two trailing assistant messages: {st}")
            st, _, n = srv.post_json("/chat/completions/input_tokens", {"messages": msgs[:1]})
            check(st == 200 and n["input_tokens"] > 2, f"input_tokens: {st} {n}")
            st, _, pred = srv.post_json("/predict", {"instances": [
                {"@requestFormat": "chatCompletions", "max_tokens": 2, "messages": msgs[:1], "stream": True},
                {"@requestFormat": "/tokenize", "content": "hello"},
                {"@requestFormat": "nothing"}]})
            p = pred.get("predictions", [])
            check(st == 200 and len(p) == 3 and p[0]["object"] == "chat.completion" and "tokens" in p[1]
                  and "error" in p[2], f"/predict: {st} {str(pred)[:400]}")
            st, headers, text = srv.request("GET", "/metrics")
            m = ss.parse_metrics(text.decode())
            check(st == 200 and "process-start-time-unix" in headers and m.get("llamacpp:tokens_predicted_total", 0) >= 4
                  and m.get("llamacpp:n_decode_total", 0) > 0, f"llamacpp metrics: {headers}")
    finally:
        del os.environ["AIP_MODE"]
        os.unlink(template)
    stats["reasoning"] = "reasoning/verbose/predict/metrics ok"


def test_infill(stats):
    qwen = os.path.join(os.path.dirname(ss.model_path()), "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    if not os.path.exists(qwen):
        stats["infill"] = "infill skipped (no Qwen2.5-Coder 0.5B)"
        return
    with ss.Server("--parallel", "1", model=qwen) as srv:
        st, _, body = srv.post_json("/infill", {
            "input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n",
            "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
            "n_predict": 8, "temperature": 0})
        check(st == 200, f"/infill: {st} {body}")
        p = body["prompt"]
        # The repo-level layout: extra file, then prefix, suffix, middle.
        check(p.startswith("<|repo_name|>myproject\n<|file_sep|>util.py\ndef sub(a, b):") and
              p.index("<|fim_prefix|>def add") < p.index("<|fim_suffix|>\n\nprint") < p.index("<|fim_middle|>"),
              f"infill prompt {p!r}")
        check("return a + b" in body["content"], f"infill answer {body['content']!r}")
        st, _, body = srv.post_json("/infill", {"input_prefix": "x", "input_suffix": "y", "input_extra": [{"filename": 1}]})
        check(st == 400, f"bad input_extra: {st}")
    stats["infill"] = "infill ok"


def test_prompt_progress(srv, stats):
    """return_progress: a prompt_progress event at admission (processed == cache) and after each
    prefill chunk (512 tokens an engine step here), processed growing to total; with
    timings_per_token each carries timings; the usage chunk carries the last timings."""
    prompt = "the quick brown fox jumps over the lazy dog " * 120  # ~1100 tokens: 3 chunks
    st, _, data = srv.post("/completion", {"prompt": prompt, "n_predict": 2, "stream": True,
                                           "return_progress": True, "timings_per_token": True})
    check(st == 200, f"/completion with return_progress: {st} {data[:200]!r}")
    progress = [e for e in raw_events(data) if "prompt_progress" in e]
    check(len(progress) >= 3, f"{len(progress)} progress events for a prompt of 3 chunks")
    first, last = progress[0]["prompt_progress"], progress[-1]["prompt_progress"]
    check(first["processed"] == first["cache"] and progress[0]["timings"]["prompt_n"] == 0,
          f"the first progress event is not the admission: {progress[0]}")
    check(last["processed"] == last["total"] and last["total"] > 1000, f"the last progress event: {last}")
    seen = [p["prompt_progress"]["processed"] for p in progress]
    check(seen == sorted(set(seen)), f"processed does not grow: {seen}")
    check(all(p["timings"]["prompt_ms"] >= 0 and p["content"] == "" for p in progress), "progress timings")
    # The same on the chat stream: role deltas carrying prompt_progress, then the answer.
    st, _, data, events = srv.stream("/v1/chat/completions", {
        "messages": [{"role": "user", "content": prompt}], "max_tokens": 2, "stream": True,
        "return_progress": True, "stream_options": {"include_usage": True}, "timings_per_token": True})
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    check(st == 200 and "prompt_progress" in chunks[0] and chunks[0]["choices"][0]["delta"]["role"] == "assistant",
          f"the chat stream's first chunk: {chunks[0] if chunks else data[:200]}")
    check(all("role" not in c["choices"][0]["delta"] for c in chunks if c["choices"] and "prompt_progress" not in c),
          "a role delta after the progress events")
    check("timings" in chunks[-1] and chunks[-1]["choices"] == [], f"the usage chunk has no timings: {chunks[-1]}")
    stats["progress"] = f"{len(progress)} prompt_progress events"


def test_post_sampling_probs(srv, stats):
    """post_sampling_probs: the probabilities the sampler drew from. With top_k 3 at most three
    tokens have any probability, so each position lists at most three, summing to 1, and the
    sampled token is one of them."""
    st, _, body = srv.post_json("/completion", {"prompt": "Once upon a time", "n_predict": 6, "n_probs": 10,
                                                "temperature": 1.0, "top_k": 3, "top_p": 1.0, "min_p": 0.0,
                                                "post_sampling_probs": True, "seed": 5})
    check(st == 200 and len(body["completion_probabilities"]) == 6, f"post_sampling_probs: {st} {str(body)[:300]}")
    for e in body["completion_probabilities"]:
        tops = e["top_probs"]
        check("logprob" not in e and 0 < e["prob"] <= 1 and 1 <= len(tops) <= 3, f"entry {e}")
        check(abs(sum(t["prob"] for t in tops) - 1.0) < 1e-4 and e["id"] in [t["id"] for t in tops], f"entry {e}")
    check(body["generation_settings"]["post_sampling_probs"] is True, "generation_settings.post_sampling_probs")
    # Without it: raw logprobs (top_logprobs over the whole vocabulary: ten of them).
    st, _, body = srv.post_json("/completion", {"prompt": "Once upon a time", "n_predict": 2, "n_probs": 10,
                                                "temperature": 1.0, "top_k": 3, "seed": 5})
    check(all(len(e["top_logprobs"]) == 10 and e["logprob"] <= 0 for e in body["completion_probabilities"]),
          f"raw logprobs: {str(body)[:300]}")
    stats["post_sampling"] = "post_sampling_probs ok"


def test_router_requests(srv, stats):
    """What sglang-router 0.3.2 and vllm-router 0.1.17 sent a worker (tests/fixtures/
    router_requests.json, tools/capture_router_requests.py): every probe path answers 200 in
    the shape the router reads, every forwarded body is answered (SGLang's own fields and
    its /generate included), and vLLM's render calls give the prompt's token ids."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "router_requests.json")
    with open(path) as f:
        fixture = json.load(f)
    n_forwarded = 0
    for run in fixture["runs"]:
        for probe in run["probes"]:
            st, _, j = srv.get_json(probe)
            check(st == 200, f"{run['router']} probe {probe}: {st} {str(j)[:200]}")
            if probe.endswith("server_info"):
                check(j["served_model_name"] == srv.model_id and j["tp_size"] == 1 and j["dp_size"] == 1
                      and j["max_running_requests"] == 2, f"{probe}: {j}")
            if probe.endswith("model_info"):
                check(j["is_generation"] is True and j["model_type"] == "gemma3" and j["model_path"], f"{probe}: {j}")
            if probe == "/get_load":
                check(isinstance(j, list) and j[0]["dp_rank"] == 0 and {"num_reqs", "num_waiting_reqs", "num_tokens"} <= set(j[0]),
                      f"/get_load: {j}")
        for fwd in run["forwarded"]:
            n_forwarded += 1
            body = fwd["body"]
            if body.get("stream"):
                st, _, data, events = srv.stream(fwd["path"], body)
                check(st == 200 and events and events[-1] == "[DONE]", f"{fwd['path']} {json.dumps(body)[:300]}: {st} {data[:300]!r}")
                if fwd["path"] == "/generate":
                    last = json.loads(events[-2])
                    check(last["meta_info"]["finish_reason"] is not None and last["text"]
                          and len(last["output_ids"]) == last["meta_info"]["completion_tokens"], f"/generate stream end: {last}")
                continue
            st, _, j = srv.post_json(fwd["path"], body)
            if "tools" in body and not srv.get_json("/props")[2]["chat_template_caps"]["supports_tool_calls"]:
                # A template with no tool-call format: the answer names the template, not a field.
                check(st == 400 and j["error"]["param"] == "tools", f"tools on this template: {st} {str(j)[:300]}")
                continue
            if fwd["path"] == "/generate":
                check(st == 200 and isinstance(j["text"], str) and j["meta_info"]["completion_tokens"] == len(j["output_ids"]),
                      f"/generate {json.dumps(body)[:300]}: {st} {str(j)[:300]}")
                if body.get("return_logprob"):
                    lps = j["meta_info"]["output_token_logprobs"]
                    check([e[1] for e in lps] == j["output_ids"] and len(j["meta_info"]["output_top_logprobs"][0]) == 2,
                          f"/generate logprobs: {j['meta_info']}")
                continue
            check(st == 200 and j["choices"], f"{fwd['path']} {json.dumps(body)[:300]}: {st} {str(j)[:300]}")
        for r in run.get("render", []):
            st, _, j = srv.post_json(r["path"], r["body"])
            if r["path"].startswith("/v1/chat/"):
                if st == 400 and (j["error"].get("code") == "no_chat_template" or j["error"]["param"] == "tools"):
                    continue  # refused as the generation itself is (above)
                check(st == 200 and j["token_ids"], f"{r['path']}: {st} {str(j)[:300]}")
            else:
                check(st == 200 and isinstance(j, list) and j[0]["token_ids"], f"{r['path']}: {st} {str(j)[:300]}")
    # /generate equals /completion on the same prompt and sampling (one engine underneath).
    st, _, g = srv.post_json("/generate", {"text": "The sea is", "sampling_params": {"max_new_tokens": 6, "temperature": 0}})
    st2, _, n = srv.post_json("/completion", {"prompt": "The sea is", "n_predict": 6, "temperature": 0, "return_tokens": True})
    check(st == 200 and st2 == 200 and g["text"] == n["content"] and g["output_ids"] == n["tokens"], f"/generate {g} vs /completion {n}")
    # Render gives the ids generation runs on.
    st, _, r = srv.post_json("/v1/completions/render", {"prompt": "The sea is"})
    st2, _, t = srv.post_json("/tokenize", {"content": "The sea is", "add_special": True})
    check(r[0]["token_ids"] == t["tokens"], f"render {r} vs tokenize {t}")
    # SGLang's fields at other values than the no-op ones are refused, naming the field.
    for field, value in (("no_stop_trim", True), ("skip_special_tokens", False), ("return_hidden_states", True)):
        st, _, data = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1, field: value})
        ss.check_error_body(st, data, 400, f"{field}={value}", field)
    for body, param in (({"text": "x", "lora_path": "a"}, "lora_path"),
                        ({"text": "x", "sampling_params": {"ebnf": "root ::= x"}}, "sampling_params.ebnf"),
                        ({"sampling_params": {}}, "text"),
                        ({"text": "x", "sampling_params": {"max_new_tokens": -2}}, "sampling_params.max_new_tokens")):
        st, _, data = srv.post("/generate", body)
        ss.check_error_body(st, data, 400, f"/generate {body}", param)
    # A one-token stream (its last update carries the token and the finish): the id once.
    st, _, data, events = srv.stream("/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 1}, "stream": True})
    last = json.loads(events[-2])
    check(len(last["output_ids"]) == 1, f"one-token /generate stream: {last}")
    # A schema string nested past the body limit is refused, not recursed into.
    deep = "[" * 100000 + "]" * 100000
    st, _, data = srv.post("/generate", {"text": "x", "sampling_params": {"json_schema": deep}})
    ss.check_error_body(st, data, 400, "a deeply nested json_schema string", "sampling_params.json_schema")
    check(srv.alive(), "the server died on a deeply nested json_schema")
    st, _, j = srv.get_json("/health_generate")
    check(st == 200, f"/health_generate: {st} {j}")
    m = srv.metrics()
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                 "sglang:num_queue_reqs", "sglang:token_usage"):
        check(any(k.startswith(name + "{") for k in m), f"/metrics lacks {name}")
    stats["router"] = f"{n_forwarded} requests of {len(fixture['runs'])} router runs answered"


def main():
    ss.require_model()
    stats = {}
    with ss.Server("--parallel", "2", "--ctx", "2048", "--seed", "1234", "--temp", "0.5", "-n", "5",
                   "--chat-template-file", ss.gemma_template()) as srv:
        srv.model_id = srv.get_json("/v1/models")[2]["data"][0]["id"]
        test_native_completion(srv, stats)
        test_openai_extras(srv, stats)
        test_side_routes(srv, stats)
        test_router_requests(srv, stats)
        test_prompt_progress(srv, stats)
        test_post_sampling_probs(srv, stats)
        check(srv.alive(), "server died")
    test_switches(stats)
    test_reasoning_vertex_verbose(stats)
    test_infill(stats)
    return ", ".join(stats.values())


if __name__ == "__main__":
    ss.run_main("test_llama_server_api", main)
