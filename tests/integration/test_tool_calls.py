"""tests/integration/test_tool_calls.py — tool calling through `specula serve` with the
official `openai` client: the SDK's tool loop (call, run the tool, send the result back,
until the model answers) completes a two-tool task (the weather in Paris, the time in
Tokyo) with Qwen2.5-Coder 1.5B, streamed and not, with the same calls both ways;
finish_reason "tool_calls"; assistant tool_calls sent back as JSON text render as the
template expects, in the client's key order: /apply-template equals Python jinja2's render
(transformers' setup) for 8 message lists with tools on the Qwen2.5 template (this part
runs with Gemma's weights: only the template matters). Forced calls (a grammar of the template's call format with each tool's parameters schema):
tool_choice "required" on a prompt that needs no tool still answers with a valid call, a named
function gives that function's call (parallel_tool_calls false: exactly one; with parallel calls
allowed this 1.5B model, pushed off its own habit of Markdown-fenced calls, repeats calls
until max_tokens); streamed the same;
Anthropic's tool_choice any / tool. Refusals: a forced call of an unknown tool, tools on
/v1/completions, tools with a template that has no tool-call format (Gemma's).
The same loop through Anthropic's Messages API with the `anthropic` client (tool_use
blocks, tool_result blocks, stop_reason "tool_use"; streamed and not) when installed.
Exit 0 pass, 1 fail, 77 skip (no Qwen2.5-Coder 1.5B GGUF, or no `openai` module).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

try:
    import openai
except ImportError:
    ss.skip("the `openai` Python module is not installed (pip install openai==3.51.0)")

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Get the current local time in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
]
TASK = "What is the weather in Paris, and what time is it in Tokyo?"
WANT = {("get_weather", "Paris"), ("get_time", "Tokyo")}


def run_tool(name, arguments):
    a = json.loads(arguments)
    if name == "get_weather":
        return json.dumps({"city": a.get("city"), "weather": "sunny", "temperature_c": 21})
    return json.dumps({"city": a.get("city"), "local_time": "14:05"})


def collect_stream(stream):
    """The assistant message of a streamed answer: (content, [(id, name, arguments)], finish)."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        ch = chunk.choices[0] if chunk.choices else None
        if ch is None:
            continue
        d = ch.delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            if tc.function:
                c["name"] += tc.function.name or ""
                c["arguments"] += tc.function.arguments or ""
        finish = ch.finish_reason or finish
    return content, [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())], finish


def tool_loop(client, model, stream):
    msgs = [{"role": "user", "content": TASK}]
    seen, trace = [], []
    for _ in range(5):
        kw = dict(model=model, messages=msgs, tools=TOOLS, temperature=0, max_tokens=150)
        if stream:
            content, calls, finish = collect_stream(client.chat.completions.create(stream=True, **kw))
        else:
            r = client.chat.completions.create(**kw)
            m = r.choices[0].message
            content, finish = m.content, r.choices[0].finish_reason
            calls = [(t.id, t.function.name, t.function.arguments) for t in (m.tool_calls or [])]
        trace.append((finish, (content or "")[:60], [(n, a) for _, n, a in calls]))
        if not calls:
            check(finish in ("stop", "length"), f"an answer without calls finished {finish}")
            return seen, content, trace
        check(finish == "tool_calls", f"calls with finish_reason {finish}: {trace}")
        msgs.append({"role": "assistant", "content": content or None,
                     "tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                    for i, n, a in calls]})
        for i, n, a in calls:
            seen.append((n, json.loads(a).get("city")))
            msgs.append({"role": "tool", "tool_call_id": i, "content": run_tool(n, a)})
    raise ss.TestFailure(f"the tool loop did not end in 5 turns: {trace}")


def anthropic_loop(client, model, stream):
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    msgs = [{"role": "user", "content": TASK}]
    seen, trace = [], []
    for _ in range(5):
        kw = dict(model=model, max_tokens=150, messages=msgs, tools=tools, extra_body={"temperature": 0})
        if stream:
            with client.messages.stream(**kw) as s:
                m = s.get_final_message()
        else:
            m = client.messages.create(**kw)
        uses = [b for b in m.content if b.type == "tool_use"]
        text = "".join(b.text for b in m.content if b.type == "text")
        trace.append((m.stop_reason, text[:60], [(b.name, b.input) for b in uses]))
        if not uses:
            check(m.stop_reason in ("end_turn", "max_tokens"), f"an answer without calls stopped {m.stop_reason}")
            return seen, text, trace
        check(m.stop_reason == "tool_use", f"tool_use blocks with stop_reason {m.stop_reason}: {trace}")
        msgs.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]})
        results = []
        for b in uses:
            seen.append((b.name, b.input.get("city")))
            results.append({"type": "tool_result", "tool_use_id": b.id, "content": run_tool(b.name, json.dumps(b.input))})
        msgs.append({"role": "user", "content": results})
    raise ss.TestFailure(f"the anthropic tool loop did not end in 5 turns: {trace}")


def forced_calls(client, aclient, model):
    """tool_choice required / named / parallel off, streamed and not; Anthropic any / tool."""
    hello = [{"role": "user", "content": "Say hello to me in one short sentence."}]
    kw = dict(model=model, messages=hello, tools=TOOLS, temperature=0, max_tokens=120)
    free = client.chat.completions.create(**kw)
    check(not free.choices[0].message.tool_calls, f"a greeting needs no tool: {free}")
    out = []
    for choice, parallel in (("required", False), ({"type": "function", "function": {"name": "get_time"}}, False)):
        r = client.chat.completions.create(tool_choice=choice, parallel_tool_calls=parallel, **kw)
        m = r.choices[0].message
        check(r.choices[0].finish_reason == "tool_calls" and m.tool_calls, f"tool_choice {choice}: {r}")
        for t in m.tool_calls:
            args = json.loads(t.function.arguments)
            check(t.function.name in ("get_weather", "get_time") and isinstance(args.get("city"), str),
                  f"tool_choice {choice}: call {t}")
        if choice != "required":
            check([t.function.name for t in m.tool_calls] == ["get_time"], f"named: {m.tool_calls}")
        _, calls, finish = collect_stream(client.chat.completions.create(
            stream=True, tool_choice=choice, parallel_tool_calls=parallel, **kw))
        check(finish == "tool_calls" and [(n, a) for _, n, a in calls] ==
              [(t.function.name, t.function.arguments) for t in m.tool_calls], f"streamed {calls} vs {m.tool_calls}")
        out.append(f"{'required' if choice == 'required' else 'named'}: "
                   + ", ".join(f"{t.function.name}({t.function.arguments})" for t in m.tool_calls))
    if aclient is not None:
        tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
                  "input_schema": t["function"]["parameters"]} for t in TOOLS]
        for choice in ({"type": "any", "disable_parallel_tool_use": True},
                       {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}):
            m = aclient.messages.create(model=model, max_tokens=120, messages=hello, tools=tools, tool_choice=choice,
                                        extra_body={"temperature": 0})
            uses = [b for b in m.content if b.type == "tool_use"]
            check(m.stop_reason == "tool_use" and uses and all(isinstance(b.input.get("city"), str) for b in uses),
                  f"anthropic tool_choice {choice}: {m}")
            if choice["type"] == "tool":
                check({b.name for b in uses} == {"get_weather"}, f"anthropic named: {uses}")
        out.append("anthropic any/tool")
    return "; ".join(out)


def jinja2_render(template_path, messages, tools):
    import jinja2

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    # OpenAI sends arguments as JSON text; templates print the object (llama.cpp and vLLM
    # parse it the same way).
    msgs = json.loads(json.dumps(messages))
    for m in msgs:
        for tc in m.get("tool_calls") or []:
            if isinstance(tc["function"].get("arguments"), str):
                tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
    with open(template_path) as f:
        return env.from_string(f.read()).render(messages=msgs, tools=tools, add_generation_prompt=True,
                                                bos_token="<bos>", eos_token="<eos>")


def test_rendering(stats):
    template = os.path.join(ss.fixtures_dir(), "chat_templates", "qwen2.5.jinja")
    tools = [{"type": "function", "function": {"name": "zeta_lookup", "description": "Z first, then a",
                                               "parameters": {"type": "object", "required": ["zulu", "alpha"],
                                                              "properties": {"zulu": {"type": "string"},
                                                                             "alpha": {"type": "integer"}}}}},
             {"function": {"parameters": {"properties": {}, "type": "object"}, "name": "noop"}, "type": "function"}]
    call = {"id": "c1", "type": "function", "function": {"name": "zeta_lookup", "arguments": '{"zulu": "x", "alpha": 2}'}}
    lists = [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "look it up"}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [call]},
         {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Let me check.", "tool_calls": [call, call]},
         {"role": "tool", "tool_call_id": "c1", "content": "one"}, {"role": "tool", "tool_call_id": "c1", "content": "two"},
         {"role": "assistant", "content": "Done."}, {"role": "user", "content": "again"}],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
         {"role": "user", "content": "c"}],
        [{"role": "user", "content": "<|im_end|> text"}, {"role": "assistant", "content": None, "tool_calls": [call]},
         {"role": "tool", "tool_call_id": "c1", "content": "<tool_response>x</tool_response>"}],
        [{"role": "user", "content": [{"type": "text", "text": "part one "}, {"type": "text", "text": "part two"}]}],
        [{"role": "user", "content": "\u00e9\u4e2d\U0001f600"}, {"role": "assistant", "content": "ok"},
         {"role": "user", "content": "tools?"}],
    ]
    with ss.Server("--parallel", "1", "--ctx", "2048", "--chat-template-file", template) as srv:
        for k, msgs in enumerate(lists):
            st, _, data = srv.post("/apply-template", {"messages": msgs, "tools": tools})
            check(st == 200, f"list {k}: {st} {data[:200]!r}")
            # Text parts are joined with a blank line, as llama-server joins them.
            flat = [dict(m, content="\n\n".join(p["text"] for p in m["content"])) if isinstance(m.get("content"), list)
                    else m for m in msgs]
            want = jinja2_render(template, flat, tools)
            got = json.loads(data)["prompt"]
            check(got == want, f"list {k}: specula's render differs from jinja2's:\n{got!r}\n{want!r}")
    stats["render"] = f"{len(lists)} message lists with tools == jinja2"


def main():
    models = os.environ.get("SPECULA_MODELS") or os.path.expanduser("~/.cache/specula/models")
    qwen = os.path.join(models, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    stats = {}
    ss.require_model()
    test_rendering(stats)
    # Gemma's template has no tool-call format: tools are refused, naming the field.
    with ss.Server("--parallel", "1", "--ctx", "512", "--chat-template-file", ss.gemma_template()) as srv:
        st, _, data = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                        "tools": TOOLS, "max_tokens": 2})
        ss.check_error_body(st, data, 400, "tools with Gemma's template", "tools")
    if not os.path.exists(qwen):
        print(f"[test_tool_calls] {stats['render']}; {qwen} not found: the tool loops are skipped", flush=True)
        ss.skip(f"{qwen} not found (specula pull qwen2.5-coder-1.5b)")
    with ss.Server("--parallel", "2", "--ctx", "4096", model=qwen) as srv:
        st, _, data = srv.request("GET", "/v1/models")
        model = json.loads(data)["data"][0]["id"]
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
        seen, final, trace = tool_loop(client, model, stream=False)
        check(set(seen) == WANT, f"calls {seen}, want {WANT}: {trace}")
        seen_s, final_s, trace_s = tool_loop(client, model, stream=True)
        check(seen_s == seen and final_s == final, f"streamed loop {trace_s} vs {trace}")
        stats["loop"] = f"{len(trace)} turns, calls {seen}, final answer {final!r:.60}"
        try:
            import anthropic
        except ImportError:
            anthropic = None
        if anthropic is not None:
            ac = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
            a_seen, a_final, a_trace = anthropic_loop(ac, model, stream=False)
            check(a_seen == seen and a_final == final, f"anthropic loop {a_trace} vs openai {trace}")
            s_seen, s_final, s_trace = anthropic_loop(ac, model, stream=True)
            check(s_seen == seen and s_final == final, f"anthropic streamed loop {s_trace} vs {a_trace}")
            stats["anthropic"] = f"{len(a_trace)} turns, same calls"
        stats["forced"] = forced_calls(client, ac if anthropic is not None else None, model)
        for body, param in (({"tool_choice": {"type": "function", "function": {"name": "get_date"}}}, "tool_choice"),
                            ({"tool_choice": "always"}, "tool_choice"),
                            ({"tools": [{"type": "function"}]}, "tools")):
            req = {"messages": [{"role": "user", "content": TASK}], "tools": TOOLS, "max_tokens": 4}
            req.update(body)
            st, _, data = srv.post("/v1/chat/completions", req)
            ss.check_error_body(st, data, 400, f"chat {body}", param)
        st, _, data = srv.post("/v1/completions", {"prompt": "x", "tools": TOOLS, "max_tokens": 2})
        ss.check_error_body(st, data, 400, "tools on /v1/completions", "tools")
    return "; ".join(f"{k}: {v}" for k, v in stats.items())


if __name__ == "__main__":
    ss.run_main("test_tool_calls", main)
