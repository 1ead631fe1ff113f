"""tests/integration/test_fuzz.py — hostile and malformed bodies against both POST routes of
`specula serve`: random bytes, truncated JSON, deep nesting (100k '['), huge numbers,
NaN/Infinity literals, wrong types per field, strings near the body limit, invalid UTF-8,
lone surrogate escapes, prompt arrays with negative/huge ids, empty or odd messages,
non-text content parts, plus random valid requests. Every answer must be a 4xx with an
OpenAI JSON error body, or a 200 that is a valid completion (JSON or SSE); afterwards the
process is alive, /health answers, and no row or queue entry is left behind.
Then SPECULA_FUZZ_N_OTHER (default 4000) bodies the same way against the other POST
routes — Anthropic's /v1/messages and /v1/messages/count_tokens (answers: 4xx with
Anthropic's error body, or a message / a token count), OpenAI's /v1/responses (a Response
object or its event stream), /v1/embeddings, /tokenize and
/detokenize (4xx OpenAI error, or their answer) — and GET routes with bodies: never a 5xx.
Reproducible: seeded RNG (SPECULA_FUZZ_SEED, default 1234); SPECULA_FUZZ_N bodies
(default 1200), sent by 4 client threads.
Does not: check the exact status or message of each case (test_raw_http.py does).
Exit 0 pass, 1 fail, 77 skip (no model).
"""

import json
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

SEED = int(os.environ.get("SPECULA_FUZZ_SEED", "1234"))
N = int(os.environ.get("SPECULA_FUZZ_N", "1200"))
N_OTHER = int(os.environ.get("SPECULA_FUZZ_N_OTHER", "4000"))
MAX_BODY = 1 << 18
CTX = int(os.environ.get("SPECULA_FUZZ_CTX", "96"))  # bounds what a valid body without max_tokens costs
C = "/v1/completions"
CH = "/v1/chat/completions"

FIELDS = ["model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
          "min_p", "seed", "n", "stream", "stop", "stream_options", "logprobs", "top_logprobs", "logit_bias",
          "presence_penalty", "frequency_penalty", "repeat_penalty", "ignore_eos", "user", "response_format",
          "grammar", "regex", "choice", "json_schema", "guided_json", "guided_regex", "guided_choice",
          "guided_grammar", "tool_choice"]
# Structured-output requests, valid and hostile (llguidance's limits, empty languages,
# self-reference, unsatisfiable schemas): a 200, or a 400 naming the field — never a 5xx.
CONSTRAINTS = [
    {"regex": "[a-z]{1,3}"}, {"regex": "a{1000000}"}, {"regex": "(a|b"}, {"regex": "\\p{L}+"}, {"regex": "x*"},
    {"choice": ["yes", "no"]}, {"choice": [""]}, {"choice": ["\u0000"]}, {"guided_choice": ["a" * 5000]},
    {"grammar": "root ::= [0-9]+"}, {"grammar": "root ::= root"}, {"grammar": "root ::= (\"a\"{9999}){9999}"},
    {"grammar": "root ::= [^\\x00-\\U0010FFFF]"}, {"grammar": "root ::= \"\\"}, {"guided_grammar": "x ::= y"},
    {"json_schema": {"type": "object"}}, {"json_schema": {"$ref": "#"}}, {"json_schema": {"type": "integer", "minimum": 5,
                                                                                          "maximum": 1}},
    {"json_schema": {"type": "string", "pattern": "(a+)+$"}}, {"json_schema": {"type": "array", "minItems": 10 ** 6}},
    {"json_schema": {"anyOf": []}}, {"json_schema": {"not": {}}}, {"json_schema": True}, {"json_schema": False},
    {"guided_json": "{\"type\": \"boolean\"}"}, {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"schema": {"enum": [1, "a", None]}}}},
    {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "objekt"}}}},
]
VALUES = [None, True, False, 0, -1, 1, 2, 1.5, -0.5, 21, "", "x", "1", [], {}, [1], [[1]], {"a": 1}, [None],
          1e300, -1e300, 2 ** 31, 2 ** 53 + 1, 2 ** 63, -2 ** 63 - 1, 2 ** 64, 10 ** 30, "\u0000", "\u2603" * 5,
          [-1], [262144], [2, 10 ** 12], ["a", 1], {"include_usage": "y"}, {"include_usage": True}]


def valid_completion(rng):
    b = {"prompt": rng.choice(["Hello", "The sky is", "", " ", "<start_of_turn>user\nhi", "\u00e9\u4e2d\U0001f600",
                                [2, 100, 200], [2]]),
         "max_tokens": rng.randint(1, 3)}
    if rng.random() < 0.3:
        b["temperature"] = rng.choice([0, 0.5, 1.0, 2.0])
    if rng.random() < 0.3:
        b["seed"] = rng.randint(-2 ** 40, 2 ** 40)
    if rng.random() < 0.3:
        b["stream"] = True
        if rng.random() < 0.5:
            b["stream_options"] = {"include_usage": True}
    if rng.random() < 0.2:
        b["logprobs"] = rng.randint(0, 20)
    if rng.random() < 0.2:
        b["stop"] = rng.choice(["\n", ["a", "b"], "", [], ["\u2603"]])
    if rng.random() < 0.1:
        b["logit_bias"] = {str(rng.randint(0, 262143)): rng.uniform(-100, 100)}
    if rng.random() < 0.15:
        b.update(rng.choice(CONSTRAINTS))
    return b


def valid_chat(rng):
    content = rng.choice(["hi", "", "   ", "\u00e9", [{"type": "text", "text": "hi"}], [], None,
                          [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]])
    msgs = [{"role": "user", "content": content}]
    if rng.random() < 0.3:
        msgs.insert(0, {"role": "system", "content": "Be brief."})
    b = {"messages": msgs, "max_tokens": rng.randint(1, 3)}
    if rng.random() < 0.3:
        b["stream"] = True
    if rng.random() < 0.2:
        b["logprobs"] = True
        b["top_logprobs"] = rng.randint(0, 20)
    if rng.random() < 0.2:
        b["temperature"] = rng.choice([0, 1.0])
    if rng.random() < 0.15:
        b.update(rng.choice(CONSTRAINTS))
    return b


OTHER_FIELDS = {
    "/v1/messages": ["model", "max_tokens", "messages", "system", "stop_sequences", "stream", "temperature", "top_p",
                     "top_k", "metadata", "tools", "tool_choice", "thinking", "output_config", "service_tier"],
    "/v1/messages/count_tokens": ["model", "messages", "system", "tools"],
    "/v1/embeddings": ["input", "model", "encoding_format", "pooling", "dimensions", "user"],
    "/tokenize": ["content", "add_special", "parse_special", "with_pieces"],
    "/detokenize": ["tokens"],
    "/v1/responses": ["model", "input", "instructions", "tools", "tool_choice", "text", "max_output_tokens", "stream",
                      "store", "previous_response_id", "reasoning", "metadata", "temperature"],
}


def valid_other(rng, route, model):
    if route in ("/v1/messages", "/v1/messages/count_tokens"):
        content = rng.choice(["hi", "", [{"type": "text", "text": "hi"}],
                              [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]])
        b = {"model": model, "messages": [{"role": "user", "content": content}]}
        if rng.random() < 0.3:
            b["system"] = rng.choice(["Be brief.", [{"type": "text", "text": "Be brief."}]])
        if route == "/v1/messages":
            b["max_tokens"] = rng.randint(1, 3)
            if rng.random() < 0.3:
                b["stream"] = True
            if rng.random() < 0.2:
                b["stop_sequences"] = rng.choice([["\n"], [], ["a", "b"]])
        return b
    if route == "/v1/responses":
        b = {"model": model, "max_output_tokens": rng.randint(1, 3),
             "input": rng.choice(["hi", [{"role": "user", "content": "hi"}],
                                  [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                                  [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                                   {"type": "function_call_output", "call_id": "c", "output": "1"}]])}
        if rng.random() < 0.3:
            b["stream"] = True
        if rng.random() < 0.3:
            b["store"] = False
        if rng.random() < 0.2:
            b["instructions"] = "Be brief."
        return b
    if route == "/v1/embeddings":
        return {"input": rng.choice(["hi", ["a", "b"], [2, 100], [[2, 5], [2]], "\u00e9\u4e2d"]),
                **({"encoding_format": "base64"} if rng.random() < 0.3 else {})}
    if route == "/tokenize":
        return {"content": rng.choice(["hi", "", "<start_of_turn>x", "\u00e9"]), "with_pieces": rng.random() < 0.5}
    return {"tokens": rng.choice([[2, 100], [], [262143], [0]])}


def make_other(rng, k, model):
    """Returns (route, body bytes, label) for the non-completion routes."""
    route = rng.choice(list(OTHER_FIELDS))
    base = valid_other(rng, route, model)
    kind = k % 10
    s = json.dumps(base)
    if kind == 0:
        return route, bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300))), "random bytes"
    if kind == 1:
        return route, s.encode()[:rng.randint(0, max(0, len(s) - 1))], "truncated JSON"
    if kind == 2:
        field = rng.choice(OTHER_FIELDS[route])
        return route, ('{"%s": %s}' % (field, nested(rng.choice([100, 10000])))).encode(), f"nested {field}"
    if kind == 3:
        lit = rng.choice(["NaN", "Infinity", "1e400", "-0", "123456789012345678901234567890", "null", "true"])
        field = rng.choice(OTHER_FIELDS[route])
        return route, (s[:-1] + ', "%s": %s}' % (field, lit)).encode(), f"literal {field}={lit}"
    if kind in (4, 5, 6):
        b = dict(base)
        for _ in range(rng.randint(1, 3)):
            b[rng.choice(OTHER_FIELDS[route] + ["frobnicate"])] = rng.choice(VALUES + [
                [{"type": None}], [{"role": "user", "content": [{"type": "image"}]}], {"type": 5}, [[None]]])
        return route, json.dumps(b).encode(), "wrong types"
    if kind == 7:
        b = bytearray(s.encode())
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(b))
            b[pos] = rng.getrandbits(8)
        return route, bytes(b), "byte mutation"
    return route, json.dumps(base).encode(), "valid-ish"


def check_other(label, route, body, status, headers, data):
    what = f"[{label}] {route} body {body[:120]!r}"
    check(status < 500, f"{what}: status {status}: {data[:300]!r}")
    ctype = headers.get("content-type", "")
    if status == 200:
        if ctype.startswith("text/event-stream"):
            check(b"event: message_stop" in data or b'"type":"error"' in data or b"event: response.completed" in data
                  or b"event: response.incomplete" in data or b"event: response.failed" in data,
                  f"{what}: odd stream {data[-200:]!r}")
            return "ok-stream"
        o = json.loads(data)
        want = {"/v1/messages": "content", "/v1/messages/count_tokens": "input_tokens", "/v1/embeddings": "data",
                "/tokenize": "tokens", "/detokenize": "content", "/v1/responses": "output"}[route]
        check(want in o, f"{what}: 200 without {want}: {o}")
        return "ok"
    check(400 <= status < 500 and ctype.startswith("application/json"), f"{what}: {status} {ctype}")
    e = json.loads(data)
    if route.startswith("/v1/messages"):
        check(e.get("type") == "error" and "message" in e.get("error", {}), f"{what}: not Anthropic's error shape: {e}")
    else:
        check("message" in e.get("error", {}), f"{what}: not an OpenAI error body: {e}")
    return str(status)


def nested(depth, open_="[", close="]"):
    return open_ * depth + close * depth


def make_body(rng, k):
    """Returns (route, body bytes, label)."""
    route = C if rng.random() < 0.5 else CH
    kind = k % 16
    base = valid_completion(rng) if route == C else valid_chat(rng)
    if kind == 0:
        return route, bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300))), "random bytes"
    if kind == 1:
        s = json.dumps(base).encode()
        return route, s[:rng.randint(0, max(0, len(s) - 1))], "truncated JSON"
    if kind == 2:
        choice = rng.randint(0, 5)
        depth = rng.choice([1000, 10000, 100000])
        if choice == 0:
            return route, b"[" * depth, "open brackets"
        if choice == 1:
            return route, nested(depth).encode(), "nested arrays"
        if choice == 2:
            field = rng.choice(["prompt", "max_tokens", "stop", "messages", "temperature", "logit_bias", "model"])
            return route, ('{"%s": %s, "max_tokens": 1}' % (field, nested(depth))).encode(), f"nested {field}"
        if choice == 3:
            return route, ('{"a":' * depth + "1" + "}" * depth).encode(), "nested objects"
        if choice == 4:
            return route, ('{"messages": [{"role": "user", "content": %s}], "max_tokens": 1}'
                           % nested(depth)).encode(), "nested content"
        return route, ('{"prompt": [2, %s], "max_tokens": 1}' % nested(depth)).encode(), "nested id"
    if kind == 3:
        lit = rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-400", "123456789012345678901234567890",
                          "-123456789012345678901234567890", "0.0000000000000000000000001", "-0", "1E+2", "0x10",
                          "01", "+1", ".5", "1.", "nan", "inf"])
        field = rng.choice(FIELDS)
        s = json.dumps(base)
        return route, (s[:-1] + ', "%s": %s}' % (field, lit)).encode(), f"literal {field}={lit}"
    if kind in (4, 5, 6):
        b = dict(base)
        for _ in range(rng.randint(1, 3)):
            b[rng.choice(FIELDS)] = rng.choice(VALUES)
        if "max_tokens" in b and b["max_tokens"] is None or b.get("max_tokens") is True:
            pass
        return route, json.dumps(b).encode(), "wrong types"
    if kind == 7:
        size = rng.choice([MAX_BODY - 200, MAX_BODY - 20, MAX_BODY + 10, MAX_BODY * 2, 50000])
        field = rng.choice(["prompt", "model", "stop", "user", "content"])
        filler = rng.choice(["a", "\u00e9", " ", "ab "]) * (size // 2)
        filler = filler.encode()[:size - 60].decode("utf-8", "ignore")
        if field == "content":
            b = {"messages": [{"role": "user", "content": filler}], "max_tokens": 1}
        else:
            b = dict(base)
            b[field] = filler
        return route, json.dumps(b, ensure_ascii=False).encode(), f"giant {field} ({size} B)"
    if kind == 8:
        bad = rng.choice([b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf",
                          b"\x80", b"\xf4\x90\x80\x80"])
        field = "prompt" if route == C else "content"
        if field == "prompt":
            return route, b'{"prompt": "a' + bad + b'b", "max_tokens": 1}', "invalid UTF-8"
        return route, b'{"messages": [{"role": "user", "content": "a' + bad + b'"}], "max_tokens": 1}', "invalid UTF-8"
    if kind == 9:
        esc = rng.choice(["\\ud800", "\\udc00", "\\ud800\\ud800", "\\udfff x", "\\ud83d", "\\u00", "\\uZZZZ",
                          "\\x41", "\\", "\\ud83d\\ude00", "\\u0000"])
        if route == C:
            return route, ('{"prompt": "a%s", "max_tokens": 1}' % esc).encode(), f"escape {esc}"
        return route, ('{"messages": [{"role": "user", "content": "a%s"}], "max_tokens": 1}' % esc).encode(), \
            f"escape {esc}"
    if kind == 10:
        ids = [rng.choice([-1, -2 ** 31, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 63 - 1, 2 ** 64, 262144, 262143, 0, 2,
                           10 ** 20, -(10 ** 20)]) for _ in range(rng.randint(1, 5))]
        return C, json.dumps({"prompt": ids, "max_tokens": 1}).encode(), "prompt ids"
    if kind == 11:
        msgs = rng.choice([[], [{}], [{"role": "user"}], [{"role": "assistant", "content": "x"}],
                           [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
                           [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}],
                           [{"role": "user", "content": [{"type": "input_audio"}]}],
                           [{"role": "user", "content": [{"type": 5}]}], [{"role": "user", "content": ["text"]}],
                           [{"role": "user", "content": [{"type": "text", "text": 5}]}],
                           [{"role": "tool", "content": "x"}], [{"role": "user", "content": {"text": "x"}}],
                           [{"role": "user", "content": "x", "name": 5, "tool_calls": [1]}], None, "hi", 5])
        return CH, json.dumps({"messages": msgs, "max_tokens": 1}).encode(), "odd messages"
    if kind == 12:
        b = base
        s = json.dumps(b)
        mut = rng.choice([lambda x: "\ufeff" + x, lambda x: " \n\t" + x + " \n", lambda x: x + x,
                          lambda x: x.replace(":", ":" + " " * 1000, 1), lambda x: x[:-1] + ', "max_tokens": 1}',
                          lambda x: x.replace('"', "'"), lambda x: x + "garbage",
                          lambda x: '{"%s": 1, ' % ("k" * 5000) + x[1:]])
        return route, mut(s).encode(), "text mutation"
    if kind == 13:
        s = bytearray(json.dumps(base).encode())
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(s))
            op = rng.randint(0, 2)
            if op == 0:
                s[pos] = rng.getrandbits(8)
            elif op == 1:
                del s[pos]
            else:
                s.insert(pos, rng.choice(b'{}[]",:\\0123456789-eE.tfn '))
        return route, bytes(s), "byte mutation"
    # 14, 15: valid (or nearly) requests.
    return route, json.dumps(base, ensure_ascii=rng.random() < 0.5).encode(), "valid-ish"


def check_answer(label, route, body, status, headers, data):
    what = f"[{label}] {route} body {body[:120]!r}"
    ctype = headers.get("content-type", "")
    if status == 200:
        if ctype.startswith("text/event-stream"):
            events = ss.parse_sse(data)
            for e in events[:-1]:
                o = json.loads(e)
                check(o.get("object") in ("text_completion", "chat.completion.chunk") or "error" in o,
                      f"{what}: odd SSE chunk {o}")
                # The one error a 200 stream may carry: the request's own grammar giving out
                # mid-generation (a 400-type error naming its field), never a server error.
                check("error" not in o or (o["error"].get("type") == "invalid_request_error"
                                           and o["error"].get("param") in FIELDS),
                      f"{what}: error inside a 200 stream: {o}")
            return "ok-stream"
        try:
            o = json.loads(data)
        except ValueError:
            raise ss.TestFailure(f"{what}: 200 with a non-JSON body {data[:200]!r}")
        want = "text_completion" if route == C else "chat.completion"
        check(o.get("object") == want and len(o.get("choices", [])) == 1, f"{what}: 200 but not a completion: {o}")
        ch = o["choices"][0]
        check(isinstance(ch.get("text") if route == C else ch["message"]["content"], str), f"{what}: no text: {o}")
        check(o["usage"]["completion_tokens"] >= 1 or ch["finish_reason"] == "stop", f"{what}: usage {o['usage']}")
        return "ok"
    check(400 <= status < 500, f"{what}: status {status}: {data[:300]!r}")
    ss.check_error_body(status, data, status, what)
    check(ctype.startswith("application/json"), f"{what}: error content type {ctype!r}")
    return str(status)


def run_phase(srv, cases, answer):
    """Sends cases (route, body, label) from 4 threads; `answer` checks each reply. Then the
    server must be alive, idle, and serve a valid request. Returns (counts, seconds)."""
    counts = {}
    t0 = time.time()

    def one(case):
        route, body, label = case
        if label == "GET with a body":
            status, headers, data = srv.request("GET", route, body)
            check(status == 200, f"GET {route} with a body: {status}")
            return "get"
        try:
            status, headers, data = srv.post(route, body, timeout=120)
        except Exception as e:  # noqa: BLE001
            # A reset is acceptable only for a body over the limit that the server
            # refused before reading it all.
            if len(body) > MAX_BODY:
                return "413-reset"
            raise ss.TestFailure(f"[{label}] {route} body {body[:300]!r}: {type(e).__name__}: {e} (server alive: {srv.alive()})")
        return answer(label, route, body, status, headers, data)

    with ThreadPoolExecutor(4) as pool:
        for outcome in pool.map(one, cases):
            counts[outcome] = counts.get(outcome, 0) + 1
    elapsed = time.time() - t0
    check(srv.alive(), "the server died")
    st, _, data = srv.request("GET", "/health")
    check(st == 200, f"/health after fuzzing: {st} {data!r}")
    srv.wait_idle(5.0)
    st, _, data = srv.post(C, {"prompt": "Hello", "max_tokens": 2})
    check(st == 200, f"a valid request after fuzzing: {st} {data[:200]!r}")
    return counts, elapsed


def main():
    ss.require_model()
    rng = random.Random(SEED)
    cases = [make_body(rng, k) for k in range(N)]
    with ss.Server("--parallel", "4", "--ctx", str(CTX), "--max-body", str(MAX_BODY),
                   "--chat-template-file", ss.gemma_template()) as srv:
        counts, elapsed = run_phase(srv, cases, check_answer)
        # The other routes.
        model = json.loads(srv.request("GET", "/v1/models")[2])["data"][0]["id"]
        others = [make_other(rng, k, model) for k in range(N_OTHER)]
        others += [(p, b'{"x": 1}', "GET with a body") for p in ("/health", "/v1/models", "/metrics")]
        other_counts, elapsed_other = run_phase(srv, others, check_other)
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    other_summary = ", ".join(f"{k}: {v}" for k, v in sorted(other_counts.items()))
    return (f"{N} completion/chat bodies (seed {SEED}) in {elapsed:.1f}s: {summary}; {len(others)} bodies on the other "
            f"routes in {elapsed_other:.1f}s: {other_summary}")


if __name__ == "__main__":
    ss.run_main("test_fuzz", main)
