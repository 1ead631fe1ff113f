"""tests/integration/test_anthropic_client.py — `specula serve`'s Anthropic Messages API
(POST /v1/messages, /v1/messages/count_tokens) driven by the official `anthropic` Python
client on Gemma 3 270M: a greedy message equals the same chat through the OpenAI route;
streaming with the SDK's event parser (text equals the whole message; the event order
message_start, content_block_start, ping, content_block_delta*, content_block_stop,
message_delta, message_stop); stop_sequences (stop_reason "stop_sequence" and which);
max_tokens; system prompts as a string and as blocks; count_tokens equals the usage's
input_tokens; refusals in Anthropic's error shape (missing max_tokens, tools, image
blocks, unknown fields, bad key -> 401 with x-api-key). Tool use:
test_tool_calls.py (it needs Qwen).
Exit 0 pass, 1 fail, 77 skip (no model, or no `anthropic` module).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

try:
    import anthropic
except ImportError:
    ss.skip("the `anthropic` Python module is not installed (pip install anthropic==2.15.0)")

MSGS = [{"role": "user", "content": "Write a short poem about the sea."}]


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


def test_messages(srv, model, stats):
    client = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
    m = client.messages.create(model=model, max_tokens=12, messages=MSGS, extra_body={"temperature": 0})
    check(m.type == "message" and m.role == "assistant" and m.model == model, f"message {m}")
    check(m.id.startswith("msg_"), f"id {m.id}")
    check(m.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {m.stop_reason}")
    check(m.usage.output_tokens >= 1 and m.usage.input_tokens > 5, f"usage {m.usage}")
    text = text_of(m)
    # The same conversation through the OpenAI route (greedy: the same tokens).
    st, _, data = srv.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 12, "temperature": 0})
    o = json.loads(data)
    check(o["choices"][0]["message"]["content"] == text, f"anthropic {text!r} vs openai {o['choices'][0]['message']['content']!r}")
    check(o["usage"]["prompt_tokens"] == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0),
          "input tokens differ from the OpenAI route")
    # max_tokens.
    m2 = client.messages.create(model=model, max_tokens=3, messages=MSGS, extra_body={"temperature": 0})
    check(m2.stop_reason == "max_tokens" and m2.usage.output_tokens == 3, f"max_tokens 3: {m2}")
    # System prompt: a string and the same as blocks give the same prompt.
    a = client.messages.create(model=model, max_tokens=6, system="You are terse.", messages=MSGS, extra_body={"temperature": 0})
    b = client.messages.create(model=model, max_tokens=6, system=[{"type": "text", "text": "You are terse."}],
                               messages=MSGS, extra_body={"temperature": 0})
    total = lambda u: u.input_tokens + (u.cache_read_input_tokens or 0)  # noqa: E731 (Anthropic: the sum)
    check(text_of(a) == text_of(b) and total(a.usage) == total(b.usage) > total(m.usage),
          f"system prompt: {a.usage} {b.usage}")
    check((b.usage.cache_read_input_tokens or 0) > 0, f"the repeated prompt was not read from the cache: {b.usage}")
    # count_tokens.
    ct = client.messages.count_tokens(model=model, system="You are terse.", messages=MSGS)
    check(ct.input_tokens == total(a.usage), f"count_tokens {ct.input_tokens} vs usage {a.usage}")
    # Stop sequences: stop on a piece of the greedy text.
    long = client.messages.create(model=model, max_tokens=24, messages=MSGS, extra_body={"temperature": 0})
    lt = text_of(long)
    words = [w for w in lt.split() if len(w) >= 3]
    if len(words) >= 2:
        stop = words[1]
        s = client.messages.create(model=model, max_tokens=24, messages=MSGS, extra_body={"temperature": 0}, stop_sequences=[stop])
        check(s.stop_reason == "stop_sequence" and s.stop_sequence == stop, f"stop: {s.stop_reason} {s.stop_sequence}")
        check(text_of(s) == lt[:lt.index(stop)], f"stop text {text_of(s)!r} vs {lt!r}")
    # Seeded sampling is allowed (temperature 1, top_k, top_p).
    r = client.messages.create(model=model, max_tokens=5, messages=MSGS, cache_control={"type": "ephemeral"},
                               extra_body={"temperature": 1.0, "top_k": 20, "top_p": 0.9})
    check(r.usage.output_tokens >= 1, f"sampled {r}")
    stats["messages"] = f"greedy == openai route, input_tokens {m.usage.input_tokens}"
    return text, m


def test_stream(srv, model, whole_text, whole, stats):
    client = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
    kinds = []
    with client.messages.stream(model=model, max_tokens=12, messages=MSGS, extra_body={"temperature": 0}) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_message()
    raw = [k for k in kinds if k not in ("text", "ping")]  # the SDK adds "text" events; pings may come anywhere
    check(raw[0] == "message_start" and raw[1] == "content_block_start" and raw[-1] == "message_stop",
          f"event order {raw}")
    check(raw[-3:] == ["content_block_stop", "message_delta", "message_stop"], f"event order tail {raw[-4:]}")
    check(all(k == "content_block_delta" for k in raw[2:-3]), f"deltas {raw}")
    check(text_of(final) == whole_text, f"stream {text_of(final)!r} vs whole {whole_text!r}")
    check(final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens,
          f"final {final.stop_reason} {final.usage}")
    # The raw event grammar: `event: <type>` lines match the data's type; ping present.
    c = srv.conn()
    c.request("POST", "/v1/messages", body=json.dumps({"model": model, "max_tokens": 4, "messages": MSGS,
                                                       "stream": True, "temperature": 0}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    check(r.status == 200 and r.getheader("content-type", "").startswith("text/event-stream"), f"stream {r.status}")
    lines = r.read().decode().split("\n")
    c.close()
    names = [ln[len("event: "):] for ln in lines if ln.startswith("event: ")]
    datas = [json.loads(ln[len("data: "):]) for ln in lines if ln.startswith("data: ")]
    check(names == [d["type"] for d in datas], f"event names vs data types: {names}")
    check("ping" in names, f"no ping: {names}")
    stats["stream"] = f"{len(raw)} events"


def test_refusals(srv, model, stats):
    client = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
    cases = [
        (dict(model=model, max_tokens=4, messages=MSGS, tools=[{"name": "f", "input_schema": {"type": "object"}}]),
         anthropic.BadRequestError, "tool-call format"),  # Gemma's template has none
        (dict(model=model, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]),
         anthropic.BadRequestError, "image"),
        (dict(model=model, max_tokens=4, messages=[{"role": "system", "content": "x"}]), anthropic.BadRequestError, "role"),
        (dict(model=model, max_tokens=4, messages=MSGS + [{"role": "assistant", "content": "The sea"}]),
         anthropic.BadRequestError, "prefill"),
        (dict(model=model, max_tokens=0, messages=MSGS), anthropic.BadRequestError, "max_tokens"),
        (dict(model=model, max_tokens=4, messages=MSGS, extra_body={"temperature": 1.5}), anthropic.BadRequestError,
         "temperature"),
        (dict(model=model, max_tokens=4, messages=MSGS, output_config={"format": {"type": "json", "schema": {}}}),
         anthropic.BadRequestError, "output_config"),
        (dict(model=model, max_tokens=4, messages=MSGS,
              output_config={"format": {"type": "json_schema", "schema": {"type": "objekt"}}}),
         anthropic.BadRequestError, "json_schema"),
        (dict(model=model, max_tokens=4, messages=MSGS, extra_body={"frobnicate": 1}), anthropic.BadRequestError,
         "frobnicate"),
    ]
    for kwargs, exc, word in cases:
        try:
            client.messages.create(**kwargs)
            raise ss.TestFailure(f"accepted: {kwargs}")
        except exc as e:
            body = e.body if isinstance(e.body, dict) else {}
            check(body.get("type") == "error" and word in body.get("error", {}).get("message", ""),
                  f"{word}: error body {e.body}")
    # Missing max_tokens (the SDK requires it, so raw HTTP).
    st, _, data = srv.post("/v1/messages", {"model": model, "messages": MSGS})
    e = json.loads(data)
    check(st == 400 and e["type"] == "error" and e["error"]["type"] == "invalid_request_error"
          and "max_tokens" in e["error"]["message"], f"missing max_tokens: {st} {e}")
    for body in ({"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": [{"type": None}]}]},
                 {"model": model, "max_tokens": 2, "messages": MSGS, "tool_choice": {"type": None}},
                 {"model": model, "max_tokens": 2, "messages": MSGS, "thinking": {"type": 5}}):
        st, _, data = srv.post("/v1/messages", body)
        check(st == 400 and json.loads(data)["type"] == "error", f"{body}: {st} {data[:200]!r}")
    st, _, data = srv.post("/v1/messages", "{")
    check(st == 400 and json.loads(data)["type"] == "error", f"bad JSON: {st} {data[:200]!r}")
    stats["refusals"] = len(cases) + 2


def test_structured(srv, model, stats):
    """output_config.format json_schema: the text block is JSON of the schema (a bounded one:
    Gemma 3 270M writes unbounded numbers forever)."""
    client = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
              "required": ["answer", "sure"], "additionalProperties": False}
    m = client.messages.create(model=model, max_tokens=40, messages=[{"role": "user", "content": "Is the sea wet?"}],
                               output_config={"format": {"type": "json_schema", "schema": schema}})
    value = json.loads(m.content[0].text)
    check(m.stop_reason == "end_turn" and value["answer"] in ("yes", "no") and isinstance(value["sure"], bool)
          and set(value) == {"answer", "sure"}, f"structured: {m}")
    stats["structured"] = m.content[0].text


def test_api_key(model, stats):
    with ss.Server("--parallel", "1", "--ctx", "512", "--chat-template-file", ss.gemma_template(),
                   "--api-key", "sekrit") as srv:
        try:
            anthropic.Anthropic(base_url=srv.url, api_key="wrong", max_retries=0).messages.create(
                model=model, max_tokens=2, messages=MSGS)
            raise ss.TestFailure("a wrong x-api-key was accepted")
        except anthropic.AuthenticationError as e:
            check(e.body.get("error", {}).get("type") == "authentication_error", f"401 body {e.body}")
        m = anthropic.Anthropic(base_url=srv.url, api_key="sekrit", max_retries=0).messages.create(
            model=model, max_tokens=2, messages=MSGS)
        check(m.usage.output_tokens >= 1, "the right key did not work")
    stats["api_key"] = "ok"


def main():
    ss.require_model()
    stats = {}
    with ss.Server("--parallel", "2", "--ctx", "1024", "--chat-template-file", ss.gemma_template()) as srv:
        st, _, data = srv.request("GET", "/v1/models")
        model = json.loads(data)["data"][0]["id"]
        text, whole = test_messages(srv, model, stats)
        test_stream(srv, model, text, whole, stats)
        test_refusals(srv, model, stats)
        test_structured(srv, model, stats)
    test_api_key(model, stats)
    return "; ".join(f"{k}: {v}" for k, v in stats.items())


if __name__ == "__main__":
    ss.run_main("test_anthropic_client", main)
