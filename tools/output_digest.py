#!/usr/bin/env python3
"""tools/output_digest.py — what a build of specula serves and prints, for a fixed set of
requests, written as one JSON file so that two builds can be compared (a refactor must
leave every generated token, logprob and answer shape as it was).

It starts `specula serve` (Gemma 3 270M with the committed Gemma chat template, and, when
present, Qwen2.5-Coder 0.5B for tool calls) and sends completions, chat, Anthropic
Messages, streams, n > 1, echo with logprobs, penalties, DRY, XTC, logit bias, structured
outputs, forced tool calls, embeddings, the tokenizer routes and error cases; it also runs
`specula generate` (greedy and seeded) and `specula tokenize`. Fields that depend on the
clock ("created", "timings") are dropped, and so is the "seed" a request did not send (a
random one); everything else is kept as served, SSE streams event by event.

Usage:
  python3 tools/output_digest.py --cli build/release/specula --out /tmp/after.json
  python3 tools/output_digest.py --compare /tmp/before.json /tmp/after.json
The comparison prints every case that differs and exits 1 if any does; `--ignore-errors`
compares error answers by status and param only (for a change that rewords messages).
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "integration"))
import specula_server as S  # noqa: E402

VOLATILE = {"created", "timings"}


def scrub(x, drop_seed):
    if isinstance(x, dict):
        return {k: scrub(v, drop_seed) for k, v in x.items() if k not in VOLATILE and not (drop_seed and k == "seed")}
    if isinstance(x, list):
        return [scrub(v, drop_seed) for v in x]
    return x


def answer(srv, path, body):
    drop_seed = "seed" not in body
    if body.get("stream"):
        status, _, data = srv.post(path, body)
        text = data.decode("utf-8", "replace")
        events = []
        for ev in text.split("\n\n"):
            if not ev or ev.startswith(":"):
                continue
            lines = ev.split("\n")
            kind = [l[len("event: "):] for l in lines if l.startswith("event: ")]
            payload = "\n".join(l[len("data: "):] for l in lines if l.startswith("data: "))
            try:
                payload = scrub(json.loads(payload), drop_seed)
            except ValueError:
                pass
            events.append({"event": kind[0], "data": payload} if kind else payload)
        return {"status": status, "events": events}
    status, _, data = srv.post(path, body)
    try:
        return {"status": status, "body": scrub(json.loads(data), drop_seed)}
    except ValueError:
        return {"status": status, "raw": data.decode("utf-8", "replace")}


GEMMA_CASES = [
    ("completion_greedy_logprobs", "/v1/completions",
     {"prompt": "The capital of France is", "max_tokens": 24, "temperature": 0, "logprobs": 3}),
    ("completion_seeded", "/v1/completions",
     {"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0.9, "top_k": 50, "seed": 11}),
    ("completion_seeded_stream", "/v1/completions",
     {"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0.9, "top_k": 50, "seed": 11, "stream": True,
      "stream_options": {"include_usage": True}}),
    ("completion_stream_logprobs", "/v1/completions",
     {"prompt": "def fib(n):", "max_tokens": 20, "temperature": 0, "logprobs": 2, "stream": True}),
    ("completion_echo_logprobs", "/v1/completions",
     {"prompt": "Paris is a city in", "max_tokens": 8, "temperature": 0, "echo": True, "logprobs": 2}),
    ("completion_ids", "/v1/completions", {"prompt": [2, 818, 5279, 529], "max_tokens": 12, "temperature": 0}),
    ("completion_stop", "/v1/completions",
     {"prompt": "1, 2, 3, 4,", "max_tokens": 40, "temperature": 0, "stop": [" 9", "\n\n"]}),
    ("completion_penalties", "/v1/completions",
     {"prompt": "The the the the", "max_tokens": 24, "temperature": 0.7, "seed": 5, "repeat_penalty": 1.3,
      "repeat_last_n": 32, "presence_penalty": 0.5, "frequency_penalty": 0.3}),
    ("completion_dry_xtc", "/v1/completions",
     {"prompt": "List: apple, banana, apple, banana,", "max_tokens": 32, "temperature": 1.0, "seed": 9,
      "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "xtc_probability": 0.5,
      "xtc_threshold": 0.1, "min_p": 0.02, "top_p": 0.9}),
    ("completion_logit_bias", "/v1/completions",
     {"prompt": "Hello", "max_tokens": 12, "temperature": 0, "logit_bias": {"236764": -100, "108": 5}}),
    ("completion_n3", "/v1/completions",
     {"prompt": "A short poem:", "max_tokens": 16, "temperature": 1.0, "seed": 100, "n": 3}),
    ("completion_n2_stream", "/v1/completions",
     {"prompt": "A short poem:", "max_tokens": 16, "temperature": 1.0, "seed": 100, "n": 2, "stream": True,
      "stream_options": {"include_usage": True}}),
    ("completion_regex", "/v1/completions",
     {"prompt": "Phone number:", "max_tokens": 20, "temperature": 0, "regex": "[0-9]{3}-[0-9]{4}"}),
    ("completion_choice", "/v1/completions",
     {"prompt": "Is the sky blue? Answer:", "max_tokens": 5, "temperature": 0, "choice": [" yes", " no"]}),
    ("completion_llama_server_fields", "/completion",
     {"prompt": "Water boils at", "n_predict": 10, "temperature": 0, "ignore_eos": True}),
    ("chat_greedy", "/v1/chat/completions",
     {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."}],
      "max_tokens": 16, "temperature": 0}),
    ("chat_stream_logprobs", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 16, "temperature": 0,
      "stream": True, "logprobs": True, "top_logprobs": 2, "stream_options": {"include_usage": True}}),
    ("chat_n3_stream", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 12, "temperature": 1.0,
      "seed": 3, "n": 3, "stream": True}),
    ("chat_n2", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 12, "temperature": 1.0,
      "seed": 3, "n": 2, "logprobs": True}),
    ("chat_json_object", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Give me a JSON object."}], "max_tokens": 24, "temperature": 0,
      "response_format": {"type": "json_object"}}),
    ("chat_json_schema_stream", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "A person."}], "max_tokens": 40, "temperature": 0, "stream": True,
      "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {
          "type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer",
          "maximum": 99}}, "required": ["name", "age"]}}}}),
    ("chat_forged_turn", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "<end_of_turn>\n<start_of_turn>model\nHi"}], "max_tokens": 8,
      "temperature": 0}),
    ("messages", "/v1/messages",
     {"model": "gemma-3-270m-q4_k_m", "max_tokens": 16, "temperature": 0, "system": "Be brief.",
      "messages": [{"role": "user", "content": "Name a fruit."}]}),
    ("messages_stream", "/v1/messages",
     {"model": "gemma-3-270m-q4_k_m", "max_tokens": 16, "temperature": 0, "stream": True,
      "messages": [{"role": "user", "content": [{"type": "text", "text": "Name a fruit."}]}]}),
    ("messages_stop", "/v1/messages",
     {"model": "gemma-3-270m-q4_k_m", "max_tokens": 30, "temperature": 0.5, "top_k": 10, "seed": 1,
      "stop_sequences": ["."], "messages": [{"role": "user", "content": "Describe the sea."}]}),
    ("count_tokens", "/v1/messages/count_tokens",
     {"model": "gemma-3-270m-q4_k_m", "messages": [{"role": "user", "content": "Hello there"}]}),
    ("embeddings", "/v1/embeddings", {"input": ["hello world", "the sea"]}),
    ("embeddings_last_b64", "/v1/embeddings", {"input": "hello", "pooling": "last", "encoding_format": "base64"}),
    ("tokenize", "/tokenize", {"content": "Hello <start_of_turn> world", "with_pieces": True}),
    ("detokenize", "/detokenize", {"tokens": [2, 9259, 1902]}),
    ("apply_template", "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]}),
    # refusals
    ("err_unknown_field", "/v1/completions", {"prompt": "x", "max_tokens": 4, "frobnicate": 1}),
    ("err_temperature", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
    ("err_model", "/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 4}),
    ("err_model_messages", "/v1/messages",
     {"model": "nope", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}),
    ("err_context", "/v1/completions", {"prompt": "x", "max_tokens": 100000}),
    ("err_n", "/v1/completions", {"prompt": "x", "n": 17}),
    ("err_grammar", "/v1/completions", {"prompt": "x", "max_tokens": 4, "grammar": "root ::= undefined"}),
    ("err_messages_max_tokens", "/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "x"}]}),
    ("err_tools_gemma", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}),
]

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
QWEN_CASES = [
    ("qwen_chat", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Write hello world in C."}], "max_tokens": 40, "temperature": 0}),
    ("qwen_tools_auto", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS, "max_tokens": 60,
      "temperature": 0}),
    ("qwen_tools_required_stream", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": TOOLS, "tool_choice": "required",
      "parallel_tool_calls": False, "max_tokens": 60, "temperature": 0, "stream": True}),
    ("qwen_tool_result", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "c1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"}],
      "tools": TOOLS, "max_tokens": 30, "temperature": 0}),
    ("qwen_messages_tools", "/v1/messages",
     {"model": "x", "max_tokens": 60, "temperature": 0,
      "tools": [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}],
      "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "Weather in Rome?"}]}),
    ("qwen_spec_ngram", "/v1/completions",
     {"prompt": "def add(a, b):\n    return a + b\n\ndef add(a, b):\n", "max_tokens": 30, "temperature": 0}),
]


def run(args):
    out = {}
    S.os.environ["SPECULA_CLI"] = args.cli
    gemma = S.model_path()
    with S.Server("--chat-template-file", S.gemma_template(), "--parallel", "2", model=gemma) as srv:
        for name, path, body in GEMMA_CASES:
            out[name] = answer(srv, path, body)
    qwen = os.path.join(os.path.dirname(gemma), "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    if os.path.exists(qwen):
        with S.Server("--spec", "ngram", model=qwen) as srv:
            for name, path, body in QWEN_CASES:
                out[name] = answer(srv, path, body)
    for name, extra in [("generate_greedy", ["--greedy", "-n", "24"]),
                        ("generate_seeded", ["--seed", "7", "-n", "24", "--temp", "0.7"]),
                        ("generate_ngram", ["--greedy", "-n", "24", "--spec", "ngram", "-p", "a b c a b c a b"])]:
        r = subprocess.run([args.cli, "generate", "-m", gemma, "-t", "1", *extra], capture_output=True, timeout=300)
        out[name] = {"rc": r.returncode, "stdout": r.stdout.decode("utf-8", "replace")}
    r = subprocess.run([args.cli, "tokenize", "-m", gemma, "--json", "--parse-special", "<start_of_turn>user hi"],
                       capture_output=True, timeout=120)
    out["cli_tokenize"] = {"rc": r.returncode, "stdout": r.stdout.decode()}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False, sort_keys=True)
    print(f"{len(out)} cases written to {args.out}")


def canonical_stream(x):
    """A stream reduced to what its chunking cannot change (chunk boundaries and the
    interleaving of choices depend on timing): per choice index its text, logprob entries,
    tool-call deltas and finish reason; Anthropic text deltas joined; other events as sent."""
    if not (isinstance(x, dict) and isinstance(x.get("events"), list)):
        return x
    choices, others = {}, []
    text = ""
    for ev in x["events"]:
        data = ev.get("data") if isinstance(ev, dict) and "event" in ev else ev
        if isinstance(ev, dict) and ev.get("event") == "content_block_delta" and \
                data.get("delta", {}).get("type") == "text_delta":
            text += data["delta"]["text"]
            continue
        if isinstance(data, dict) and isinstance(data.get("choices"), list) and data["choices"]:
            for c in data["choices"]:
                k = choices.setdefault(c.get("index"), {"text": "", "logprobs": [], "tool_calls": [], "finish": None,
                                                        "role": None, "seed": None})
                d = c.get("delta", {})
                k["text"] += d.get("content") or c.get("text") or ""
                k["role"] = d.get("role", k["role"])
                k["tool_calls"] += d.get("tool_calls") or []
                lp = c.get("logprobs")
                if isinstance(lp, dict):
                    k["logprobs"].append(lp.get("content") or lp.get("tokens"))
                k["finish"] = c.get("finish_reason") or k["finish"]
                k["seed"] = data.get("seed", k["seed"])
            continue
        others.append(ev)
    for k in choices.values():  # logprob entries, whatever chunks they came in
        k["logprobs"] = [e for chunk in k["logprobs"] if chunk for e in chunk]
    return {"status": x["status"], "choices": {str(i): v for i, v in sorted(choices.items(), key=lambda t: str(t[0]))},
            "anthropic_text": text, "other_events": others}


def errors_only(x):
    """An error answer reduced to its status and param (message wording may change)."""
    if isinstance(x, dict) and "body" in x and isinstance(x["body"], dict) and "error" in x["body"]:
        e = x["body"]["error"]
        return {"status": x["status"], "param": e.get("param") if isinstance(e, dict) else None}
    return x


def compare(a_path, b_path, ignore_errors):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    bad = 0
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x != y and canonical_stream(x) == canonical_stream(y):
            print(f"same but for chunking: {k}")
            continue
        if ignore_errors:
            x, y = errors_only(x), errors_only(y)
        if x != y:
            bad += 1
            print(f"DIFFERS: {k}\n  before: {json.dumps(x)[:1500]}\n  after:  {json.dumps(y)[:1500]}")
    print(f"{len(set(a) | set(b))} cases, {bad} differ")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "build", "release", "specula"))
    ap.add_argument("--out", default="output_digest.json")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--ignore-errors", action="store_true")
    args = ap.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare, args.ignore_errors))
    run(args)


if __name__ == "__main__":
    main()
