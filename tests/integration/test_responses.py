"""tests/integration/test_responses.py — OpenAI's Responses API (POST /v1/responses, GET /
DELETE /v1/responses/{id}, input_items) through the official `openai` Python SDK, unmodified,
on Qwen2.5-Coder 0.5B:
  - plain: the answer equals /v1/chat/completions' on the same messages (greedy), usage adds up;
  - streamed == whole: the event sequence (created, in_progress, item / part added, deltas,
    done events, completed; sequence_number 0, 1, 2, ...) rebuilds the same text, also through
    the SDK's responses.stream() helper;
  - structured: text.format json_schema gives JSON valid for the schema, streamed the same;
  - a tool loop of 3 turns via previous_response_id: each request sends only its new items,
    the answer equals the one for the whole conversation sent as input (store false), and
    usage.input_tokens_details.cached_tokens covers the previous turn's prompt (the history
    came from the prompt cache);
  - restart with --cache-dir: the stored response and its cached prompt survive (a follow-up
    continues it, cached_tokens > 0, GET retrieves it);
  - bad input: unknown item types and fields, non-function tools, an unknown
    previous_response_id (404), one of another model and one evicted (--responses-max 1)
    (400 naming previous_response_id), DELETE then GET (404).
Exit 0 pass, 1 fail, 77 skip (no Qwen2.5-Coder 0.5B GGUF or Gemma 3 GGUF, or no `openai`).
"""

import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

try:
    import openai
except ImportError:
    ss.skip("the `openai` Python module is not installed (pip install openai==3.51.0)")

TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"type": "function", "name": "get_time", "description": "Get the current local time in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)


def expect_error(fn, status, param, what, contains=None):
    try:
        fn()
    except openai.APIStatusError as e:
        check(e.status_code == status, f"{what}: status {e.status_code}, want {status}: {e.body}")
        body = e.body if isinstance(e.body, dict) else {}
        err = body.get("error", body)
        check(err.get("param") == param, f"{what}: param {err.get('param')!r}, want {param!r}: {e.body}")
        if contains:
            check(contains in err.get("message", ""), f"{what}: message lacks {contains!r}: {e.body}")
        return
    raise ss.TestFailure(f"{what}: no error")


def stream_events(c, **kw):
    """The raw event stream of one streamed request: (events, rebuilt text, final response)."""
    events = list(c.responses.create(stream=True, **kw))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    return events, text, events[-1].response


def check_event_grammar(events, what):
    types = [e.type for e in events]
    check(types[:2] == ["response.created", "response.in_progress"], f"{what}: starts {types[:2]}")
    check(types[-1] in ("response.completed", "response.incomplete"), f"{what}: ends {types[-1]}")
    check([e.sequence_number for e in events] == list(range(len(events))), f"{what}: sequence numbers")
    # Every item: added before its deltas, done after them.
    open_items = {}
    for e in events:
        if e.type == "response.output_item.added":
            check(e.output_index not in open_items, f"{what}: item {e.output_index} added twice")
            open_items[e.output_index] = e.item.id
        elif e.type in ("response.output_text.delta", "response.reasoning_text.delta",
                        "response.function_call_arguments.delta", "response.content_part.added"):
            check(open_items.get(e.output_index) == e.item_id, f"{what}: {e.type} for an item not open")
        elif e.type == "response.output_item.done":
            check(open_items.pop(e.output_index, None) == e.item.id, f"{what}: done for an item not open")
    check(not open_items, f"{what}: items never done: {open_items}")


def test_plain_and_stream(srv, stats):
    c = client(srv)
    kw = dict(model="qwen", input="Name three primary colors.", max_output_tokens=24, temperature=0)
    r = c.responses.create(**kw)
    check(r.object == "response" and r.status in ("completed", "incomplete"), f"status {r.status}")
    check(r.id.startswith("resp_") and r.model, f"id/model: {r.id} {r.model}")
    chat = c.chat.completions.create(model="qwen", messages=[{"role": "user", "content": kw["input"]}],
                                     max_tokens=24, temperature=0)
    check(r.output_text == chat.choices[0].message.content,
          f"responses {r.output_text!r} != chat {chat.choices[0].message.content!r}")
    u = r.usage
    check(u.total_tokens == u.input_tokens + u.output_tokens and u.output_tokens > 0, f"usage {u}")
    check(u.input_tokens == chat.usage.prompt_tokens, f"input_tokens {u.input_tokens} != {chat.usage.prompt_tokens}")
    # Streamed == whole.
    events, text, final = stream_events(c, **kw)
    check_event_grammar(events, "stream")
    check(text == r.output_text, f"streamed {text!r} != whole {r.output_text!r}")
    check(final.output_text == r.output_text, "final response text")
    with c.responses.stream(**kw) as s:
        for _ in s:
            pass
        helper = s.get_final_response()
    check(helper.output_text == r.output_text, f"stream() helper {helper.output_text!r}")
    # instructions become the system prompt (as chat's system message).
    ri = c.responses.create(model="qwen", instructions="Answer in French.", input="Say hello.", max_output_tokens=12,
                            temperature=0)
    ci = c.chat.completions.create(model="qwen", messages=[{"role": "system", "content": "Answer in French."},
                                                           {"role": "user", "content": "Say hello."}],
                                   max_tokens=12, temperature=0)
    check(ri.output_text == ci.choices[0].message.content, "instructions != system message")
    check(c.responses.retrieve(r.id).output_text == r.output_text, "retrieve")
    stats["plain"] = r.output_text


def test_structured(srv, stats):
    c = client(srv)
    kw = dict(model="qwen", input="Give me a person named Bob who is 30 years old, as JSON.", temperature=0,
              max_output_tokens=40,
              text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}})
    r = c.responses.create(**kw)
    obj = json.loads(r.output_text)
    check(set(obj) == {"name", "age"} and isinstance(obj["age"], int), f"structured: {obj}")
    _, text, _ = stream_events(c, **kw)
    check(text == r.output_text, f"structured streamed {text!r} != {r.output_text!r}")
    r2 = c.responses.create(model="qwen", input="A JSON object with key a = 1", temperature=0, max_output_tokens=20,
                            text={"format": {"type": "json_object"}})
    check(isinstance(json.loads(r2.output_text), dict), f"json_object: {r2.output_text!r}")
    stats["structured"] = r.output_text


def test_tool_loop(srv, stats):
    """Turn 1: a question -> a call; turn 2: its output -> another call; turn 3: its output ->
    an answer. Each turn sends only the new items (previous_response_id)."""
    c = client(srv)
    results = {"get_weather": "18 C and sunny", "get_time": "14:05"}
    user = [{"role": "user", "content": "What is the weather in Paris, and what time is it in Tokyo?"}]
    # (the last turn keeps the tools: tool_choice "none" would take them out of the template's
    # system prompt, and with it the cached prefix)
    plan = [{"type": "function", "name": "get_weather"}, {"type": "function", "name": "get_time"}, "auto"]
    prev, prev_input, history, cached = None, 0, list(user), []
    new_items = user
    for turn, choice in enumerate(plan):
        kw = dict(model="qwen", tools=TOOLS, tool_choice=choice, parallel_tool_calls=False, temperature=0,
                  max_output_tokens=48)
        r = c.responses.create(input=new_items, previous_response_id=prev, **kw) if prev else \
            c.responses.create(input=new_items, **kw)
        check(len(new_items) == 1, "each turn sends one new item")
        # Oracle: the same conversation sent whole, not stored.
        whole = c.responses.create(input=history, store=False, **kw)
        check([o.type for o in r.output] == [o.type for o in whole.output], f"turn {turn}: items differ")
        if choice == "auto":
            check(r.output_text == whole.output_text, f"turn {turn}: {r.output_text!r} != {whole.output_text!r}")
        else:
            calls = [o for o in r.output if o.type == "function_call"]
            check(len(calls) == 1 and calls[0].name == choice["name"], f"turn {turn}: calls {r.output}")
            check(json.loads(calls[0].arguments) == json.loads(
                [o for o in whole.output if o.type == "function_call"][0].arguments), f"turn {turn}: arguments")
            check("city" in json.loads(calls[0].arguments), f"turn {turn}: arguments {calls[0].arguments}")
        if prev:
            # The history came from the prompt cache: at least the previous prompt.
            got = r.usage.input_tokens_details.cached_tokens
            check(got >= prev_input - 1, f"turn {turn}: cached {got} < previous prompt {prev_input}")
            cached.append(got)
        history += [o.model_dump(exclude_none=True) for o in r.output]
        if choice != "auto":
            call = [o for o in r.output if o.type == "function_call"][0]
            new_items = [{"type": "function_call_output", "call_id": call.call_id, "output": results[call.name]}]
            history += new_items
        prev, prev_input = r.id, r.usage.input_tokens
    # A forced call streamed: function_call_arguments events rebuild the whole answer's call.
    kw = dict(model="qwen", tools=TOOLS, tool_choice={"type": "function", "name": "get_weather"},
              parallel_tool_calls=False, temperature=0, max_output_tokens=48, input=user)
    whole = c.responses.create(**kw)
    events = list(c.responses.create(stream=True, **kw))
    check_event_grammar(events, "tool stream")
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    wcall = [o for o in whole.output if o.type == "function_call"][0]
    check(len(done) == 1 and done[0].name == "get_weather" and args == done[0].arguments == wcall.arguments,
          f"tool stream: {args!r} {done} vs {wcall}")
    items = c.responses.input_items.list(prev)
    check(len(items.data) == len(history) - 1, f"input_items: {len(items.data)} vs {len(history) - 1}")
    stats["tool_loop_cached"] = cached


def test_bad_input(srv, stats):
    c = client(srv)
    base = dict(model="qwen", max_output_tokens=4)
    expect_error(lambda: c.responses.create(input=[{"type": "bogus"}], **base), 400, "input", "unknown item type", "bogus")
    expect_error(lambda: c.responses.create(input=[{"type": "item_reference", "id": "x"}], **base), 400, "input",
                 "item_reference")
    expect_error(lambda: c.responses.create(input="x", extra_body={"frobnicate": 1}, **base), 400, "frobnicate",
                 "unknown field")
    expect_error(lambda: c.responses.create(input="x", tools=[{"type": "web_search"}], **base), 400, "tools",
                 "web_search tool")
    expect_error(lambda: c.responses.create(input="x", background=True, **base), 400, "background", "background")
    expect_error(lambda: c.responses.create(input=[{"type": "function_call_output", "call_id": "c9", "output": "1"}],
                                            **base), 400, "input", "an output that answers no call", "answers no")
    expect_error(lambda: c.responses.create(input="x", tools=[{"type": "function", "function": {"name": "f"}}], **base),
                 400, "tools", "a chat-shaped tool", "flat")
    expect_error(lambda: c.responses.create(input="x", previous_response_id="hello", **base), 400,
                 "previous_response_id", "not a response id", "resp_")
    expect_error(lambda: c.responses.create(input="x", extra_body={"text": {"format": "json"}}, **base), 400, "text",
                 "text.format as a string")
    expect_error(lambda: c.responses.create(input=[{"role": "user", "content": [{"type": "bogus_part"}]}], **base),
                 400, "input", "an unknown part", "bogus_part")
    expect_error(lambda: c.responses.create(input="x", previous_response_id="resp_doesnotexist", **base), 404,
                 "previous_response_id", "unknown previous_response_id")
    expect_error(lambda: c.responses.create(input=[{"role": "user", "content": [{"type": "input_image",
                                                                                  "image_url": "http://x"}]}], **base),
                 400, "input", "image")
    expect_error(lambda: c.responses.create(input="x", reasoning={"effort": "extreme"}, **base), 400, "reasoning",
                 "bad effort")
    r = c.responses.create(input="Hi", **base)
    c.responses.delete(r.id)
    expect_error(lambda: c.responses.retrieve(r.id), 404, "response_id", "GET after DELETE")
    expect_error(lambda: c.responses.create(input="x", previous_response_id=r.id, **base), 404,
                 "previous_response_id", "deleted previous_response_id")
    # The item routes: a wrong method, an unknown action.
    st, _, _ = srv.request("PUT", f"/v1/responses/{r.id}")
    check(st in (404, 405), f"PUT on a response: {st}")
    r3 = c.responses.create(input="Hi", **base)
    st, _, data = srv.request("POST", f"/v1/responses/{r3.id}")
    check(st == 405, f"POST on a response: {st} {data[:200]!r}")
    st, _, data = srv.request("GET", f"/v1/responses/{r3.id}/frobnicate")
    check(st == 404, f"unknown action: {st} {data[:200]!r}")
    st, _, data = srv.request("POST", f"/v1/responses/{r3.id}/cancel")
    check(st == 400 and b"background" in data, f"cancel: {st} {data[:200]!r}")
    # While it runs a response is in_progress (GET), cannot be continued, and may be deleted:
    # then its answer is not stored when it finishes.
    stream = c.responses.create(input="Count from 1 to 50, one number per line.", stream=True, model="qwen",
                                max_output_tokens=60, temperature=0)
    it = iter(stream)
    first = next(it)
    rid = first.response.id
    check(c.responses.retrieve(rid).status == "in_progress", "GET while it runs")
    expect_error(lambda: c.responses.create(input="x", previous_response_id=rid, **base), 400, "previous_response_id",
                 "continuing a response in progress", "in progress")
    c.responses.delete(rid)
    last = list(it)[-1]
    check(last.type in ("response.completed", "response.incomplete"), f"the deleted one still answered: {last.type}")
    expect_error(lambda: c.responses.retrieve(rid), 404, "response_id", "deleted while it ran")
    # store false: nothing to continue from.
    r2 = c.responses.create(input="Hi", store=False, **base)
    expect_error(lambda: c.responses.retrieve(r2.id), 404, "response_id", "store false")


def main():
    qwen = ss.require_qwen05()
    gemma = ss.require_model()
    stats = {}
    with ss.Server(model=qwen) as srv:
        test_plain_and_stream(srv, stats)
        test_structured(srv, stats)
        test_tool_loop(srv, stats)
        test_bad_input(srv, stats)
    # Two models, a store of one response: another model's response, then an evicted one.
    srv = ss.Server("-m", f"gemma={gemma}", "--responses-max", "1", model=f"qwen={qwen}")
    with srv:
        c = client(srv)
        a = c.responses.create(model="qwen", input="Hi", max_output_tokens=4)
        expect_error(lambda: c.responses.create(model="gemma", input="x", previous_response_id=a.id, max_output_tokens=4),
                     400, "previous_response_id", "another model's response", "belongs to model")
        b = c.responses.create(model="qwen", input="Hello", max_output_tokens=4)
        check(c.responses.retrieve(b.id).id == b.id, "retrieve with two models")
        expect_error(lambda: c.responses.create(model="qwen", input="x", previous_response_id=a.id, max_output_tokens=4),
                     400, "previous_response_id", "evicted response", "evicted")
    # Restart with --cache-dir: the response and its prompt survive.
    d = tempfile.mkdtemp(prefix="specula_responses_")
    try:
        with ss.Server("--cache-dir", d, model=qwen) as srv:
            c = client(srv)
            first = c.responses.create(model="qwen", input="My favourite number is 42. Reply with OK.",
                                       max_output_tokens=8, temperature=0)
        check(os.path.exists(os.path.join(d, "responses", first.id + ".json")), "no stored response file")
        with ss.Server("--cache-dir", d, model=qwen) as srv:
            c = client(srv)
            check(c.responses.retrieve(first.id).output_text == first.output_text, "retrieve after restart")
            r = c.responses.create(model="qwen", previous_response_id=first.id, input="What is my favourite number?",
                                   max_output_tokens=12, temperature=0)
            got = r.usage.input_tokens_details.cached_tokens
            check(got >= first.usage.input_tokens - 1, f"after restart: cached {got} < {first.usage.input_tokens}")
            stats["restart_cached"] = f"{got}/{r.usage.input_tokens}"
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return ", ".join(f"{k}={v}" for k, v in stats.items())


if __name__ == "__main__":
    ss.run_main("responses", main)
