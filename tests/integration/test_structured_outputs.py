"""tests/integration/test_structured_outputs.py — structured outputs through `specula serve`
with the official `openai` client, judged by `jsonschema` (PyPI):
- the schemas of tests/fixtures/structured/schemas.json (tools/make_structured_schemas.py:
  nested objects, arrays with bounds, enums, anyOf/oneOf, patterns, $ref, optional
  properties) as response_format json_schema: every answer parses and validates, greedy
  and sampled;
- greedy answers with speculative decoding (n-gram drafts, the grammar's forced tokens as
  free drafts) equal the plain ones token for token;
- a batch of 8 (4 constrained, greedy or seeded-sampled, beside 4 unconstrained) gives each
  request the text it gets alone;
- regex, choice, GBNF grammar, json_object, vLLM's guided_* names, /v1/completions;
- refusals: a 400 naming the field for a bad schema / regex / grammar, two constraints.
Model: Qwen2.5-Coder 0.5B (scripts/test fetches it). Gemma 3 270M is too small for this:
greedy, it writes unbounded numbers digit after digit until max_tokens (a JSON number has no
length limit, and the grammar does not invent one).
Exit 0 pass, 1 fail, 77 skip (no Qwen2.5-Coder 0.5B, no `openai` or `jsonschema` module).
"""

import concurrent.futures as cf
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
    import jsonschema
except ImportError:
    ss.skip("the `jsonschema` Python module is not installed (pip install jsonschema==4.26.0)")

MAX_TOKENS = 200
MODEL_ID = None  # the served model's id (the file name without .gguf)


def load_cases():
    with open(os.path.join(ss.fixtures_dir(), "structured", "schemas.json")) as f:
        return json.load(f)["cases"]


def ask(client, case, temperature, seed=1, speculative=True, max_tokens=MAX_TOKENS):
    r = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": case["prompt"]}], max_tokens=max_tokens,
        temperature=temperature, seed=seed, extra_body={"speculative": speculative},
        response_format={"type": "json_schema", "json_schema": {"name": case["name"], "schema": case["schema"],
                                                                "strict": True}})
    return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens


def validate(case, text, finish, n, what):
    check(finish == "stop", f"{case['name']} {what}: finish_reason {finish} for {text!r}")
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ss.TestFailure(f"{case['name']} {what}: not JSON ({e}): {text!r}")
    try:
        jsonschema.validate(value, case["schema"])
    except jsonschema.ValidationError as e:
        raise ss.TestFailure(f"{case['name']} {what}: does not validate ({e.message}): {text!r}")


def raw_post(srv, path, body):
    status, _, data = srv.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return status, json.loads(data) if data else None


def run():
    models = os.environ.get("SPECULA_MODELS") or os.path.expanduser("~/.cache/specula/models")
    qwen = os.path.join(models, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    if not os.path.exists(qwen):
        ss.skip(f"{qwen} not found (scripts/fetch_model.sh qwen2.5-coder-0.5b)")
    model = qwen
    global MODEL_ID
    MODEL_ID = os.path.basename(model)[:-len(".gguf")]
    cases = load_cases()
    check(len(cases) >= 50, f"only {len(cases)} schemas")
    stats = {}
    with ss.Server("--parallel", "8", "--ctx", "8192", "--spec", "ngram", "--spec-max-batch", "0",
                   model=model) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=600)
        pool = cf.ThreadPoolExecutor(8)

        # Greedy, plain and speculative: valid, and the same text.
        plain = list(pool.map(lambda c: ask(client, c, 0.0, speculative=False), cases))
        spec = list(pool.map(lambda c: ask(client, c, 0.0, speculative=True), cases))
        for c, (t, f, n), s in zip(cases, plain, spec):
            validate(c, t, f, n, "greedy")
            check(s == (t, f, n), f"{c['name']}: speculative {s} != plain {(t, f, n)}")
        # Sampled (each its own seed): valid.
        sampled = list(pool.map(lambda kc: ask(client, kc[1], 0.8, seed=100 + kc[0]), enumerate(cases)))
        for c, (t, f, n) in zip(cases, sampled):
            validate(c, t, f, n, "sampled")
        stats["schemas"] = len(cases)

        # A batch of 8: 4 constrained rows beside 4 unconstrained ones, each as when alone.
        free_prompts = ["Write a haiku about the sea.", "List three prime numbers.", "What is 12 times 7?",
                        "Name a famous painter."]

        def free(p):
            r = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": p}], max_tokens=48,
                                               temperature=0, extra_body={"speculative": False})
            return r.choices[0].message.content
        alone = [free(p) for p in free_prompts]
        jobs = [pool.submit(ask, client, cases[k], 0.0, 1, False) for k in range(4)]
        jobs += [pool.submit(free, p) for p in free_prompts]
        got = [j.result() for j in jobs]
        for k in range(4):
            check(got[k] == plain[k], f"batch: constrained {cases[k]['name']} {got[k]!r} != alone {plain[k]!r}")
        check(got[4:] == alone, f"batch: unconstrained rows changed: {got[4:]} != {alone}")
        # Sampled (seeded) constrained rows beside unconstrained ones: the same answers as in
        # the sampled pass above, and valid.
        jobs = [pool.submit(ask, client, cases[k], 0.8, 100 + k) for k in range(4, 8)]
        jobs += [pool.submit(free, p) for p in free_prompts]
        got = [j.result() for j in jobs]
        for i, k in enumerate(range(4, 8)):
            check(got[i] == sampled[k], f"batch: sampled {cases[k]['name']} {got[i]!r} != {sampled[k]!r}")
        check(got[4:] == alone, f"batch: unconstrained rows changed beside sampled ones: {got[4:]}")

        # n > 1: every choice is held to the schema from its first token, and choice i is
        # what n = 1 gives with seed + i.
        c3 = cases[2]
        r = client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": c3["prompt"]}], max_tokens=MAX_TOKENS,
            temperature=0.8, seed=500, n=3,
            response_format={"type": "json_schema", "json_schema": {"name": c3["name"], "schema": c3["schema"]}})
        for i, ch in enumerate(r.choices):
            validate(c3, ch.message.content, ch.finish_reason, 0, f"n=3 choice {i}")
            alone = ask(client, c3, 0.8, seed=500 + i)
            check(ch.message.content == alone[0], f"n=3 choice {i} {ch.message.content!r} != seed+{i} alone {alone[0]!r}")
        status, j = raw_post(srv, "/v1/completions", {"prompt": "def add(a, b):", "n": 2, "max_tokens": 20,
                                                      "temperature": 0, "regex": "\n    return a \\+ b"})
        check(status == 200 and [c["text"] for c in j["choices"]] == ["\n    return a + b"] * 2, f"n=2 regex: {j}")

        # Other constraint kinds, both routes.
        def comp(body):
            status, j = raw_post(srv, "/v1/completions", {"max_tokens": 40, "temperature": 0, **body})
            check(status == 200, f"{body}: status {status} {j}")
            return j["choices"][0]["text"], j["choices"][0]["finish_reason"]
        t, f = comp({"prompt": "Call me at", "regex": r"\(\d{3}\) \d{3}-\d{4}"})
        check(re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", t) and f == "stop", f"regex: {t!r} {f}")
        t, f = comp({"prompt": "The capital of France is", "guided_regex": r" [A-Z][a-z]+\."})
        check(re.fullmatch(r" [A-Z][a-z]+\.", t) and f == "stop", f"guided_regex: {t!r} {f}")
        for field in ("choice", "guided_choice"):
            t, f = comp({"prompt": "Is the sky blue? Answer:", field: [" yes", " no", " maybe"]})
            check(t in (" yes", " no", " maybe") and f == "stop", f"{field}: {t!r} {f}")
        gbnf = 'root ::= answer "."\nanswer ::= "yes" | "no" # a comment\n'
        t, f = comp({"prompt": "Is water wet? Answer:", "grammar": gbnf})
        check(t in ("yes.", "no.") and f == "stop", f"grammar: {t!r} {f}")
        t, f = comp({"prompt": "Numbers:", "guided_grammar": 'root ::= [0-9]{2,3} ("," [0-9]{2,3}){2}'})
        check(re.fullmatch(r"[0-9]{2,3}(,[0-9]{2,3}){2}", t) and f == "stop", f"guided_grammar: {t!r} {f}")
        t, f = comp({"prompt": "A JSON object:", "max_tokens": MAX_TOKENS, "response_format": {"type": "json_object"}})
        check(f == "stop" and isinstance(json.loads(t), dict), f"json_object: {t!r} {f}")
        t, f = comp({"prompt": "A person:", "max_tokens": MAX_TOKENS, "guided_json": json.dumps(cases[0]["schema"])})
        jsonschema.validate(json.loads(t), cases[0]["schema"])
        r = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "An object:"}],
                                           max_tokens=MAX_TOKENS, temperature=0,
                                           response_format={"type": "json_object"})
        check(isinstance(json.loads(r.choices[0].message.content), dict), f"chat json_object: {r}")
        # Streamed: the deltas add up to a valid answer.
        text = ""
        for chunk in client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": cases[1]["prompt"]}], max_tokens=MAX_TOKENS,
                temperature=0, stream=True, extra_body={"speculative": False},
                response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": cases[1]["schema"]}}):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        check(text == plain[1][0], f"stream {text!r} != {plain[1][0]!r}")
        # Speculation pays: the grammar's forced tokens are accepted drafts.
        m = ss.parse_metrics(srv.request("GET", "/metrics")[2].decode())
        check(m.get("specula_grammar_masks_total", 0) > 1000, f"grammar masks not counted: {m}")
        stats["accepted"] = int(m.get("specula_spec_accepted_tokens_total", -1))

        # Refusals: 400 naming the field.
        bad = [
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}},
             "response_format"),
            ({"response_format": {"type": "xml"}}, "response_format"),
            ({"response_format": {"type": "json_schema"}}, "response_format"),
            ({"regex": "(unclosed"}, "regex"),
            ({"grammar": "root ::= missing"}, "grammar"),
            ({"grammar": "root ::= \"a"}, "grammar"),
            ({"choice": []}, "choice"),
            ({"guided_json": "{not json"}, "guided_json"),
            ({"regex": "a+", "choice": ["a"]}, "choice"),
        ]
        for body, field in bad:
            for path, base in (("/v1/completions", {"prompt": "x"}),
                               ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
                status, j = raw_post(srv, path, {**base, "max_tokens": 4, **body})
                ss.check_error_body(status, json.dumps(j).encode(), 400, f"{path} {body}", param=field)
        stats["refusals"] = len(bad) * 2
        pool.shutdown()
    return (f"{stats['schemas']} schemas valid greedy + sampled, speculative == plain, batch of 8 invariant, "
            f"{stats['accepted']} drafts accepted, regex/choice/grammar/json_object/guided_*, {stats['refusals']} refusals ({os.path.basename(model)})")


if __name__ == "__main__":
    ss.run_main("structured_outputs", run)
