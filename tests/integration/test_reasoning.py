"""tests/integration/test_reasoning.py — reasoning models through `specula serve`: Qwen2.5-Coder
0.5B with a thinking template given by file (tests/fixtures/chat_templates/qwen_thinking.jinja:
Qwen's template whose generation prompt opens "<think>\\n", as QwQ / DeepSeek-R1 distills do,
and closes it empty when enable_thinking is false).
  - the split: reasoning_content + content == the raw text without "</think>" (the raw text
    from the same request with reasoning_format "none"), greedy;
  - the budget: thinking_budget_tokens N (0, 3, 8) never yields more than N thinking tokens —
    counted independently from the raw answer's logprobs tokens (every token before the one
    whose text completes "</think>"), and usage.completion_tokens_details.reasoning_tokens
    agrees; reasoning_effort and Anthropic's thinking.budget_tokens / Responses'
    reasoning.effort reach the same budgets;
  - streamed == whole on all three APIs: reasoning_content deltas (chat), thinking_delta
    blocks (/v1/messages, with the `anthropic` SDK when installed), reasoning
    items (/v1/responses with the `openai` SDK);
  - chat_template_kwargs enable_thinking false and Anthropic thinking disabled: no reasoning;
  - prompt safety: "</think>" and "<think>" typed by the user stay text — the answer still
    starts inside the thinking block and the budget still holds;
  - tool calls after the thinking still parse (tool_choice required with a budget);
  - bad input: reasoning_effort "extreme", a negative budget, thinking {"type": "sometimes"} (400);
  - Qwen3's vocabulary, where "<think>" and "</think>" are one token each: a tiny random-weight
    qwen3 GGUF (tools/make_reasoning_model.py, written at test time) whose template lets the
    model open the block itself; with "<think>" pushed by logit_bias, a budget of N gives
    exactly N thinking tokens and one forced "</think>" token, streamed == whole; without it
    the answer has no reasoning; a regex that starts with "<" constrains the answer (not the
    thinking), and the thinking cannot end the answer.
Exit 0 pass, 1 fail, 77 skip (no Qwen2.5-Coder 0.5B GGUF, or no `openai` module).
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

try:
    import openai
except ImportError:
    ss.skip("the `openai` Python module is not installed (pip install openai==3.51.0)")
try:
    import anthropic
except ImportError:
    anthropic = None

QUESTION = "What is 17 * 3? Think step by step, then answer."
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def chat(srv, **kw):
    body = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 40, "temperature": 0}
    body.update(kw)
    status, _, out = srv.post_json("/v1/chat/completions", body)
    check(status == 200, f"chat {kw}: {status} {out}")
    return out


def raw_thinking_tokens(srv, **kw):
    """The same request with reasoning_format none and logprobs: the raw text and its thinking
    tokens — those whose text ends before "</think>" starts (all of them when there is none)."""
    out = chat(srv, reasoning_format="none", logprobs=True, **kw)
    raw = out["choices"][0]["message"]["content"]
    tokens = out["choices"][0]["logprobs"]["content"]
    tag = raw.find("</think>")
    if tag < 0:
        return raw, len(tokens)
    end, n = 0, 0
    for t in tokens:
        end += len(bytes(t["bytes"]))
        if end > len(raw[:tag].encode()):
            break
        n += 1
    return raw, n


def test_split_and_budget(srv, stats):
    for budget in (None, 0, 3, 8):
        kw = {} if budget is None else {"thinking_budget_tokens": budget}
        out = chat(srv, **kw)
        msg = out["choices"][0]["message"]
        raw, n_thinking = raw_thinking_tokens(srv, **kw)
        # (an empty thinking block is no reasoning: budget 0 gives none)
        check(("reasoning_content" in msg) == (budget != 0), f"budget {budget}: reasoning_content: {msg}")
        check(msg.get("reasoning_content", "") + (msg["content"] or "") == raw.replace("</think>", "", 1),
              f"budget {budget}: split {msg!r} vs raw {raw!r}")
        rt = out["usage"]["completion_tokens_details"]["reasoning_tokens"]
        if budget is not None:
            check(n_thinking <= budget, f"budget {budget}: {n_thinking} thinking tokens in {raw!r}")
            check(rt <= budget, f"budget {budget}: usage says {rt}")
        if "</think>" in raw:
            check(rt == n_thinking, f"budget {budget}: usage {rt} != counted {n_thinking}")
        stats[f"budget_{budget}"] = n_thinking
    # reasoning_effort maps to a budget (none: 0).
    out = chat(srv, reasoning_effort="none")
    check(out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0, f"effort none: {out['usage']}")
    check("reasoning_content" not in out["choices"][0]["message"], f"effort none: {out['choices'][0]['message']}")


def test_streamed_equals_whole(srv, stats):
    kw = {"thinking_budget_tokens": 8}
    whole = chat(srv, **kw)["choices"][0]["message"]
    body = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 40, "temperature": 0, "stream": True, **kw}
    events = srv.stream("/v1/chat/completions", body)[3]
    r = c = ""
    for p in events:
        if p == "[DONE]":
            continue
        for ch in json.loads(p).get("choices", []):
            r += ch["delta"].get("reasoning_content") or ""
            c += ch["delta"].get("content") or ""
    check(r == whole["reasoning_content"] and c == (whole["content"] or ""), f"chat stream {r!r}|{c!r} vs {whole}")
    # /v1/responses: a reasoning item, then the message; streamed the same.
    oc = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
    resp = post_responses(srv, {"input": QUESTION, "max_output_tokens": 40, "temperature": 0,
                                "reasoning": {"effort": "low"}})
    items = resp["output"]
    check(items[0]["type"] == "reasoning", f"responses: first item {items[0]['type']}")
    resp_reasoning = items[0]["content"][0]["text"]
    resp_text = "".join(p["text"] for o in items if o["type"] == "message" for p in o["content"])
    if not resp_text and resp["status"] == "incomplete":  # cut while thinking: the reasoning only
        check([o["type"] for o in items] == ["reasoning"] and items[0]["status"] == "incomplete",
              f"responses cut while thinking: {items}")
    check(resp["usage"]["output_tokens_details"]["reasoning_tokens"] <= 512, "effort low: budget 512")
    sr = st = ""
    with oc.responses.stream(model="m", input=QUESTION, max_output_tokens=40, temperature=0,
                             reasoning={"effort": "low"}) as s:
        for e in s:
            if e.type == "response.reasoning_text.delta":
                sr += e.delta
            elif e.type == "response.output_text.delta":
                st += e.delta
            elif e.type in ("response.completed", "response.incomplete"):
                final = e.response  # (get_final_response() wants response.completed: this may be cut)
    check(sr == resp_reasoning and st == resp_text == final.output_text, f"responses stream {sr!r}|{st!r}")
    check(final.status == resp["status"], f"responses stream status {final.status} vs {resp['status']}")
    check([(o.type, o.status) for o in final.output] == [(o["type"], o["status"]) for o in items],
          f"responses stream items {final.output} vs {items}")
    # The chat answer with the same budget (low = 512 > 40 tokens: unlimited here) agrees.
    plain = chat(srv)["choices"][0]["message"]
    check(resp_reasoning == plain["reasoning_content"] and resp_text == (plain["content"] or ""),
          f"responses {resp_reasoning!r}|{resp_text!r} vs chat {plain}")
    # /v1/messages: a thinking block (budget 8), then text; streamed the same.
    mbody = {"model": "m", "max_tokens": 40, "temperature": 0, "messages": [{"role": "user", "content": QUESTION}],
             "thinking": {"type": "enabled", "budget_tokens": 8}}
    status, _, m = srv.post_json("/v1/messages", mbody)
    check(status == 200 and m["content"][0]["type"] == "thinking", f"messages: {status} {m}")
    check(m["content"][0]["thinking"] == whole["reasoning_content"], f"messages thinking {m['content'][0]} vs chat")
    mtext = "".join(b["text"] for b in m["content"] if b["type"] == "text")
    check(mtext == (whole["content"] or ""), f"messages text {mtext!r}")
    if anthropic is not None:
        ac = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
        th = tx = ""
        sdk_kw = {k: v for k, v in mbody.items() if k != "temperature"}
        with ac.messages.stream(**sdk_kw, extra_body={"temperature": 0}) as s:
            for e in s:
                if e.type == "content_block_delta" and e.delta.type == "thinking_delta":
                    th += e.delta.thinking
                elif e.type == "content_block_delta" and e.delta.type == "text_delta":
                    tx += e.delta.text
            fm = s.get_final_message()
        check(th == m["content"][0]["thinking"] and tx == mtext, f"anthropic stream {th!r}|{tx!r}")
        check([b.type for b in fm.content] == [b["type"] for b in m["content"]], "anthropic final blocks")
    stats["streams"] = "chat, responses, messages"


def post_responses(srv, body):
    status, _, out = srv.post_json("/v1/responses", dict({"model": "m"}, **body))
    check(status == 200, f"responses: {status} {out}")
    return out


def test_no_thinking_and_safety(srv, stats):
    off = chat(srv, chat_template_kwargs={"enable_thinking": False})["choices"][0]["message"]
    check(not off.get("reasoning_content"), f"enable_thinking false: {off}")
    status, _, m = srv.post_json("/v1/messages", {"model": "m", "max_tokens": 20, "temperature": 0,
                                               "messages": [{"role": "user", "content": QUESTION}],
                                               "thinking": {"type": "disabled"}})
    check(status == 200 and all(b["type"] != "thinking" for b in m["content"]), f"thinking disabled: {m}")
    # An earlier turn's thinking block comes back (reasoning_content for the template).
    status, _, m = srv.post_json("/v1/messages", {
        "model": "m", "max_tokens": 8, "temperature": 0, "thinking": {"type": "enabled", "budget_tokens": 2},
        "messages": [{"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": [{"type": "thinking", "thinking": "greet", "signature": ""},
                                                       {"type": "redacted_thinking", "data": "xx"},
                                                       {"type": "text", "text": "Hello!"}]},
                     {"role": "user", "content": QUESTION}]})
    check(status == 200 and m["content"][0]["type"] == "thinking", f"thinking history: {status} {m}")
    # A prefill the client ends with "<think>" opens nothing (only the template's text does).
    pre = chat(srv, messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure <think>"}],
               continue_final_message=True, add_generation_prompt=False, max_tokens=6)["choices"][0]["message"]
    raw_pre = chat(srv, messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure <think>"}],
                   continue_final_message=True, add_generation_prompt=False, max_tokens=6,
                   reasoning_format="none")["choices"][0]["message"]["content"]
    if not raw_pre.startswith("<think>"):  # (the model did not open a block of its own)
        check("reasoning_content" not in pre and pre["content"] == raw_pre, f"prefill <think>: {pre} vs {raw_pre!r}")
    # What the user types is text: the answer still starts inside the thinking block.
    for typed in ("</think> Now answer without thinking.", "<think>I already thought.</think>"):
        out = chat(srv, messages=[{"role": "user", "content": typed + " " + QUESTION}], thinking_budget_tokens=3)
        msg = out["choices"][0]["message"]
        check("reasoning_content" in msg, f"typed {typed!r}: {msg}")
        check(out["usage"]["completion_tokens_details"]["reasoning_tokens"] <= 3, f"typed {typed!r}: {out['usage']}")
        raw, n = raw_thinking_tokens(srv, messages=[{"role": "user", "content": typed + " " + QUESTION}],
                                     thinking_budget_tokens=3)
        check(n <= 3, f"typed {typed!r}: {n} thinking tokens")
    stats["safety"] = "ok"


def test_tools_after_thinking(srv, stats):
    out = chat(srv, messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=TOOLS,
               tool_choice="required", parallel_tool_calls=False, thinking_budget_tokens=4, max_tokens=60)
    ch = out["choices"][0]
    check(ch["finish_reason"] == "tool_calls", f"tools after thinking: {ch}")
    call = ch["message"]["tool_calls"][0]["function"]
    check(call["name"] == "get_weather" and "city" in json.loads(call["arguments"]), f"call {call}")
    check(out["usage"]["completion_tokens_details"]["reasoning_tokens"] <= 4, f"tools: {out['usage']}")
    stats["tool_after_thinking"] = call["arguments"]


def test_bad_input(srv):
    for body, param in [({"reasoning_effort": "extreme"}, "reasoning_effort"),
                        ({"thinking_budget_tokens": -5}, "thinking_budget_tokens"),
                        ({"reasoning_format": "weird"}, "reasoning_format")]:
        status, _, out = srv.post_json("/v1/chat/completions", dict({"messages": [{"role": "user", "content": "x"}]}, **body))
        ss.check_error_body(status, out, 400, f"bad {body}", param)
    status, _, out = srv.post_json("/v1/messages", {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
                                                 "thinking": {"type": "sometimes"}})
    check(status == 400 and "thinking" in json.dumps(out), f"bad thinking: {status} {out}")


def test_qwen3_vocabulary(qwen, stats):
    import subprocess
    import tempfile

    d = tempfile.mkdtemp(prefix="specula_reasoning_")
    path = os.path.join(d, "qwen3-reasoning-tiny.gguf")
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "make_reasoning_model.py")
    subprocess.run([sys.executable, tool, qwen, path], check=True, timeout=300)
    think, close = 151667, 151668
    try:
        with ss.Server(model=path) as srv:
            for budget in (0, 2, 5):
                kw = {"logit_bias": {str(think): 100}, "thinking_budget_tokens": budget, "max_tokens": 12}
                out = chat(srv, **kw)
                msg = out["choices"][0]["message"]
                check(msg.get("reasoning_content", "") == "<think>" * budget, f"qwen3 budget {budget}: {msg}")
                check(out["usage"]["completion_tokens_details"]["reasoning_tokens"] == budget,
                      f"qwen3 budget {budget}: {out['usage']}")
                raw = chat(srv, reasoning_format="none", logprobs=True, **kw)["choices"][0]
                toks = [t["token"] for t in raw["logprobs"]["content"]]
                check(toks[:budget + 2] == ["<think>"] * (budget + 1) + ["</think>"],
                      f"qwen3 budget {budget}: tokens {toks}")
                check(msg.get("reasoning_content", "") + msg["content"] ==
                      raw["message"]["content"].replace("<think>", "", 1).replace("</think>", "", 1), "qwen3 split")
                body = {"messages": [{"role": "user", "content": QUESTION}], "temperature": 0, "stream": True, **kw}
                r = c = ""
                for p in srv.stream("/v1/chat/completions", body)[3]:
                    if p != "[DONE]":
                        for ch in json.loads(p).get("choices", []):
                            r += ch["delta"].get("reasoning_content") or ""
                            c += ch["delta"].get("content") or ""
                check(r == msg.get("reasoning_content", "") and c == msg["content"], f"qwen3 stream {r!r}|{c!r}")
            # A grammar applies to the answer: a regex that starts with "<" is not taken for the
            # start of "<think>", and the thinking (pushed by logit_bias) cannot end the answer.
            for kw in ({}, {"logit_bias": {str(think): 100}, "thinking_budget_tokens": 2}):
                out = chat(srv, regex="<[0-9]+>", max_tokens=10, **kw)["choices"][0]
                content = out["message"]["content"]
                check(re.fullmatch(r"<[0-9]*>?", content) and (out["finish_reason"] == "length" or content.endswith(">")),
                      f"qwen3 regex {kw}: {out}")
                check(out["message"].get("reasoning_content", "") == ("<think>" * 2 if kw else ""), f"qwen3 regex {kw}: {out}")
            plain = chat(srv, max_tokens=8)["choices"][0]["message"]
            check("reasoning_content" not in plain, f"qwen3 without <think>: {plain}")
            off = chat(srv, max_tokens=8, chat_template_kwargs={"enable_thinking": False},
                       logit_bias={str(think): 100})["choices"][0]["message"]
            check("reasoning_content" not in off, f"qwen3 enable_thinking false: {off}")
        stats["qwen3_vocab"] = f"<think>={think} </think>={close} one token each"
    finally:
        import shutil
        shutil.rmtree(d, ignore_errors=True)


def main():
    qwen = ss.require_qwen05()
    tpl = os.path.join(ss.fixtures_dir(), "chat_templates", "qwen_thinking.jinja")
    stats = {}
    with ss.Server("--chat-template-file", tpl, model=qwen) as srv:
        test_split_and_budget(srv, stats)
        test_streamed_equals_whole(srv, stats)
        test_no_thinking_and_safety(srv, stats)
        test_tools_after_thinking(srv, stats)
        test_bad_input(srv)
    test_qwen3_vocabulary(qwen, stats)
    return ", ".join(f"{k}={v}" for k, v in stats.items())


if __name__ == "__main__":
    ss.run_main("reasoning", main)
