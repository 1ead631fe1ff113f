#!/usr/bin/env python3
"""tests/integration/test_new_user.py — what a new user tripped over on a fresh clone
(issue 25), each checked against a real `specula serve`:

  1. role "developer" reaches the template as the system prompt (Qwen: the prompt tokens of
     "system", not of no system message — before, its template dropped the message; Gemma:
     no "roles must alternate"); /apply-template too;
  2. a prompt that starts with the BOS text gets one BOS, said once in the log;
  3. scoring: lm-evaluation-harness's local-completions request (tokenized [[ids]],
     echo, logprobs 1, max_tokens 1, temperature 0, seed 1234) parsed as lm-eval parses it,
     and max_tokens 0 (no generation: the prompt's logprobs, equal to those max_tokens 1
     gives); /completion with n_predict 0; errors name n_predict;
  4. a regex that does not compile says why;
  5. /metrics prints integers exactly and has the per-request histograms;
  6. a chat template that uses '%03d'|format (and batch, groupby, wordwrap) serves;
  7. API errors carry no "[component]" tags;
  8. /v1/embeddings `dimensions`: the first N values, renormalised;
  9. a generation cut inside a multi-byte character ends before it (no U+FFFD);
 11. one [request] line per request in the log, none with --log-requests 0.
(Item 10, the CLI's --version and unknown verbs, is tests/cli/cli_test.cpp.)
Exit 0 pass, 1 fail, 77 skip (no model).
"""
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

C = "/v1/completions"
CH = "/v1/chat/completions"


def ok(srv, path, body):
    st, _, j = srv.post_json(path, body)
    check(st == 200, f"{path} {json.dumps(body)[:200]}: status {st}: {j}")
    return j


def lm_eval_parse_logprobs(out, ctxlen):
    """lm_eval 0.4.13 LocalCompletionsAPI.parse_logprobs for one choice: the continuation's
    summed logprob (token_logprobs[ctxlen:-1]) and whether it is greedy."""
    choice = sorted(out["choices"], key=lambda c: c["index"])[0]
    lps = choice["logprobs"]["token_logprobs"][ctxlen:-1]
    tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
    greedy = all(tok == max(top.values()) for tok, top in zip(lps, tops))
    return sum(lps), greedy


def test_developer_role_qwen(qwen):
    with ss.Server("--parallel", "1", model=qwen) as srv:
        def prompt_tokens(messages):
            return ok(srv, CH, {"messages": messages, "max_tokens": 1, "temperature": 0})["usage"]["prompt_tokens"]
        user = {"role": "user", "content": "Write a haiku."}
        instr = "Answer only in French and never use the letter e."
        none = prompt_tokens([user])
        system = prompt_tokens([{"role": "system", "content": instr}, user])
        developer = prompt_tokens([{"role": "developer", "content": instr}, user])
        # (Qwen's template writes its own system prompt when none is given: a different count.)
        check(developer == system != none, f"developer {developer}, system {system}, none {none} prompt tokens")
        st, _, j = srv.post_json("/apply-template", {"messages": [{"role": "developer", "content": instr}, user]})
        check(st == 200 and instr in j["prompt"] and "<|im_start|>system" in j["prompt"], f"/apply-template: {j}")


def test_scoring(srv):
    ids = ss.tokenize("The capital of France is Paris")
    ctx = ss.tokenize("The capital of France is")
    ctxlen = len(ctx)
    # lm-eval's loglikelihood request, as LocalCompletionsAPI._create_payload writes it.
    out = ok(srv, C, {"model": "gemma-3-270m-q4_k_m", "prompt": [ids], "temperature": 0, "max_tokens": 1,
                      "logprobs": 1, "seed": 1234, "echo": True})
    lp = out["choices"][0]["logprobs"]
    check(len(lp["token_logprobs"]) == len(ids) + 1 and lp["token_logprobs"][0] is None,
          f"echo + 1 token: {len(lp['token_logprobs'])} entries for {len(ids)} prompt tokens")
    total, greedy = lm_eval_parse_logprobs(out, ctxlen)
    check(math.isfinite(total) and total < 0, f"continuation logprob {total}")
    # max_tokens 0: the prompt alone, the same numbers.
    zero = ok(srv, C, {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0})
    zlp = zero["choices"][0]["logprobs"]
    check(zero["usage"]["completion_tokens"] == 0 and zero["choices"][0]["finish_reason"] == "length",
          f"max_tokens 0 answer {zero['usage']} {zero['choices'][0]['finish_reason']}")
    check(len(zlp["token_logprobs"]) == len(ids), f"max_tokens 0: {len(zlp['token_logprobs'])} entries, want {len(ids)}")
    check(zlp["token_logprobs"] == lp["token_logprobs"][:len(ids)], "max_tokens 0 and 1 give other prompt logprobs")
    check(zero["choices"][0]["text"] == "The capital of France is Paris" or zero["choices"][0]["text"].endswith("Paris"),
          f"echo text {zero['choices'][0]['text']!r}")
    check(abs(sum(zlp["token_logprobs"][ctxlen:]) - total) < 1e-6, "max_tokens 0 scores the continuation otherwise")
    # A batch of prompts: one choice each, in order.
    batch = ok(srv, C, {"prompt": [ids, ctx], "max_tokens": 0, "echo": True, "logprobs": 1})
    check([c["index"] for c in batch["choices"]] == [0, 1], f"batch indexes {batch['choices']}")
    check(batch["choices"][0]["logprobs"]["token_logprobs"] == zlp["token_logprobs"], "batch choice 0 differs")
    check(batch["usage"]["prompt_tokens"] == len(ids) + len(ctx), f"batch usage {batch['usage']}")
    # llama-server's /completion with n_predict 0, and its errors naming n_predict.
    np0 = ok(srv, "/completion", {"prompt": "Hello", "n_predict": 0})
    check(np0["tokens_predicted"] == 0 and np0["content"] == "", f"n_predict 0: {np0}")
    st, _, data = srv.post("/completion", {"prompt": "Hello", "n_predict": -7})
    ss.check_error_body(st, data, 400, "n_predict -7", "n_predict")
    for field in ("n_predict", "max_completion_tokens", "max_tokens"):
        st, _, data = srv.post("/completion", {"prompt": "Hello", field: 100000})
        e = ss.check_error_body(st, data, 400, f"{field} beyond the context", field)
        check(e["code"] == "context_length_exceeded" and field in e["message"], f"context error {e}")
    # A batch: one seed reproduces every prompt; one larger than rows + queue is a 400.
    body = {"prompt": ["Once upon a time", "My favourite food is"], "max_tokens": 8, "temperature": 1.0}
    first = ok(srv, C, body)
    again = ok(srv, C, dict(body, seed=first["seed"]))
    check([c["text"] for c in again["choices"]] == [c["text"] for c in first["choices"]],
          f"the reported seed {first['seed']} does not reproduce the batch")
    # A batch with a grammar: one compiled, a clone per prompt, each text in the language.
    g = ok(srv, C, {"prompt": ["Number:", "Code:"], "max_tokens": 8, "regex": "[0-9]{3}", "temperature": 0})
    check(all(re.fullmatch("[0-9]{3}", c["text"]) for c in g["choices"]), f"batch with regex: {g['choices']}")
    st, _, data = srv.post(C, {"prompt": ["x"] * 64, "max_tokens": 1})
    e = ss.check_error_body(st, data, 400, "a batch over rows + queue", "prompt")
    check("--queue" in e["message"], f"the batch error does not say why: {e['message']!r}")
    return greedy


def item(results, name, fn):
    """Runs one item; a failure is recorded and the others still run."""
    try:
        fn()
        results.append((name, None))
    except ss.TestFailure as e:
        results.append((name, str(e)))
    except (KeyError, TypeError, IndexError, ValueError) as e:  # an answer of another shape
        results.append((name, f"{type(e).__name__}: {e}"))


def gemma_items(srv, results):
    def developer():
        def chat_prompt(role):
            return ok(srv, CH, {"messages": [{"role": role, "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                                "max_tokens": 1, "temperature": 0})["usage"]["prompt_tokens"]
        check(chat_prompt("developer") == chat_prompt("system"), "Gemma: developer and system prompts differ")

    def bos():
        one = ok(srv, C, {"prompt": "<bos>Hello", "max_tokens": 1, "temperature": 0})
        plain = ok(srv, C, {"prompt": "Hello", "max_tokens": 1, "temperature": 0})
        check(one["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"] == 2,
              f"'<bos>Hello' has {one['usage']['prompt_tokens']} prompt tokens, 'Hello' {plain['usage']['prompt_tokens']}")
        ok(srv, C, {"prompt": "<bos>Again", "max_tokens": 1})
        check(srv.stderr().count("not adding a second one") == 1, "the double-BOS note is not in the log exactly once")

    def regex():
        st, _, data = srv.post(C, {"prompt": "x", "max_tokens": 2, "regex": "(unclosed"})
        e = ss.check_error_body(st, data, 400, "bad regex", "regex")
        check("unclosed group" in e["message"], f"the regex error does not say why: {e['message']!r}")

    def metrics():
        ok(srv, C, {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        text = srv.request("GET", "/metrics")[2].decode()
        for name in ("process_resident_memory_bytes", "specula_kv_budget_bytes", "specula_prompt_cache_bytes{tier=\"ram\"}"):
            m = re.search("^" + re.escape(name) + r" (\S+)$", text, re.M)
            check(m and re.fullmatch(r"\d+", m.group(1)), f"{name} is not an exact integer: {m and m.group(1)}")
        for h in ("time_to_first_token_seconds", "time_per_output_token_seconds", "request_latency_seconds",
                  "request_prompt_tokens", "request_generation_tokens"):
            m = re.search(r"^specula_" + h + r"_count (\d+)$", text, re.M)
            check(m and int(m.group(1)) > 0, f"histogram specula_{h} missing or empty")

    def tags():
        for body in ({"prompt": "x", "max_tokens": 100000}, {"prompt": "x", "max_tokens": 2, "grammar": "root ::= x"},
                     {"prompt": "x", "max_tokens": 2, "json_schema": {"$ref": "#/nope"}}):
            st, _, data = srv.post(C, body)
            e = ss.check_error_body(st, data, 400, f"error {body}")
            check(not re.search(r"\[[a-z_]+\] ", e["message"]), f"internal tag in {e['message']!r}")

    def dimensions():
        full = ok(srv, "/v1/embeddings", {"input": "the sea"})["data"][0]["embedding"]
        short = ok(srv, "/v1/embeddings", {"input": "the sea", "dimensions": 64})["data"][0]["embedding"]
        norm = math.sqrt(sum(x * x for x in full[:64]))
        check(len(short) == 64 and all(abs(a - b / norm) < 1e-6 for a, b in zip(short, full[:64])),
              "dimensions 64 is not the first 64 values renormalised")
        check(abs(sum(x * x for x in short) - 1) < 1e-5, "shortened embedding not unit length")

    def utf8_cut():
        # A character cut by max_tokens: its first byte token forced with logit_bias.
        tok = ok(srv, "/tokenize", {"content": "\U000F0000", "with_pieces": True})["tokens"]
        lead = tok[0]["id"]  # the 0xF3 byte of a 4-byte character
        cut = ok(srv, C, {"prompt": "hi", "max_tokens": 1, "temperature": 0, "logit_bias": {str(lead): 100},
                          "logprobs": 0})
        check(cut["choices"][0]["text"] == "", f"cut character gave {cut['choices'][0]['text']!r}")
        check(len(cut["choices"][0]["logprobs"]["tokens"]) == 1, "the cut token's logprob entry is missing")
        chat_cut = ok(srv, CH, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "temperature": 0,
                                "logit_bias": {str(lead): 100}, "logprobs": True})
        entry = chat_cut["choices"][0]["logprobs"]["content"][0]
        check(chat_cut["choices"][0]["message"]["content"] == "" and entry["bytes"] == tok[0]["piece"],
              f"chat: cut character {chat_cut['choices'][0]['message']['content']!r}, bytes {entry['bytes']}")

    def request_log():
        log = [l for l in srv.stderr().splitlines() if l.startswith("[request] ")]
        check(len(log) >= 10, f"{len(log)} request log lines")
        gen = [l for l in log if "path=/v1/completions" in l and "status=200" in l and "generated_tokens=" in l]
        check(gen and all(re.search(r" prompt_tokens=\d+ cached_tokens=\d+ generated_tokens=\d+", l) for l in gen),
              f"completion log lines: {gen[:2]}")
        check(any("status=400" in l for l in log), "refused requests are not logged")
        check(not any("path=/metrics" in l for l in log), "/metrics polls are logged")

    item(results, "1 developer role (Gemma)", developer)
    item(results, "2 double BOS", bos)
    item(results, "3 scoring", lambda: test_scoring(srv))
    item(results, "4 regex error", regex)
    item(results, "5 metrics", metrics)
    item(results, "7 no internal tags", tags)
    item(results, "8 dimensions", dimensions)
    item(results, "9 UTF-8 cut", utf8_cut)
    item(results, "11 request log", request_log)


def run():
    gemma = ss.require_model()
    numbered = os.path.join(ss.fixtures_dir(), "chat_templates", "numbered.jinja")
    results = []
    with ss.Server("--chat-template-file", ss.gemma_template(), "--parallel", "2", "--ctx", "1024", "--queue", "8") as srv:
        gemma_items(srv, results)

    def format_template():
        with ss.Server("--chat-template-file", numbered, "--log-requests", "0") as srv:
            st, _, j = srv.post_json("/apply-template", {"messages": [{"role": "user", "content": "Hi"},
                                                                      {"role": "assistant", "content": "Hello"},
                                                                      {"role": "user", "content": "Bye"}]})
            check(st == 200 and "#001" in j["prompt"] and "#003" in j["prompt"], f"numbered template: {j}")
            ok(srv, CH, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
            check("[request]" not in srv.stderr(), "--log-requests 0 still logs")
    item(results, "6 '%03d'|format template, --log-requests 0", format_template)
    qwen = os.path.join(os.path.dirname(gemma), "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    if os.path.exists(qwen):
        item(results, "1 developer role (Qwen)", lambda: test_developer_role_qwen(qwen))
    failed = [f"{name}: {why}" for name, why in results if why]
    check(not failed, "\n  ".join([f"{len(failed)} of {len(results)} items fail:"] + failed))
    return ", ".join(name for name, _ in results)


if __name__ == "__main__":
    ss.run_main("new_user", run)
