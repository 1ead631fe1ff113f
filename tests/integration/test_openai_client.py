"""tests/integration/test_openai_client.py — `specula serve` driven by the official `openai`
Python client on Gemma 3 270M: completions and chat (streamed and not), logprobs, stop
strings across token boundaries, seeds, usage, n > 1 (choice i == seed + i alone, prompt prefilled once), greedy stream == whole,
/v1/models, the API key (401 / OK / open /health), and chat without a template (400).
Does not: test raw HTTP framing or error bodies field by field (test_raw_http.py), load
(test_concurrency.py) or hostile input (test_fuzz.py).
Exit 0 pass, 1 fail, 77 skip (no model, or no `openai` module).
"""

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

try:
    import openai
except ImportError:
    ss.skip("the `openai` Python module is not installed (pip install openai==3.51.0)")

PROMPT = "The capital of France is Paris. The capital of Germany is"
N = 10
SN = 16  # tokens for the stop-string tests
_POOL = ThreadPoolExecutor(4)


def par(*calls):
    """Runs independent requests at once (the server batches them; results do not depend on
    the batch) and returns their results in order."""
    futures = [_POOL.submit(c) for c in calls]
    return [f.result() for f in futures]


def render_chat(messages):
    import jinja2

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = jinja2.Environment()
    env.globals["raise_exception"] = raise_exception
    with open(ss.gemma_template()) as f:
        t = env.from_string(f.read())
    return t.render(messages=messages, add_generation_prompt=True, bos_token="<bos>", eos_token="<eos>")


def tokenize_chat(messages):
    text = render_chat(messages)
    check(text.startswith("<bos>"), "gemma3.jinja no longer writes <bos>")
    ids = ss.tokenize(text[len("<bos>"):])  # the CLI adds BOS itself
    return ids


def check_descending(vals, what):
    check(all(vals[i] >= vals[i + 1] for i in range(len(vals) - 1)), f"{what}: top logprobs not descending: {vals}")
    check(all(v <= 0.0 for v in vals), f"{what}: logprob > 0: {vals}")


def test_models(client, stats):
    models = client.models.list()
    ids = [m.id for m in models.data]
    check(ids == [stats["model_id"]], f"/v1/models lists {ids}, want [{stats['model_id']}]")


def test_completions(client, stats):
    mid = stats["model_id"]
    prompt_ids = ss.tokenize(PROMPT)
    r, chunks, chunks_nu = par(
        lambda: client.completions.create(model=mid, prompt=PROMPT, max_tokens=N, temperature=0),
        lambda: list(client.completions.create(model=mid, prompt=PROMPT, max_tokens=N, temperature=0, stream=True,
                                               stream_options={"include_usage": True})),
        lambda: list(client.completions.create(model=mid, prompt=PROMPT, max_tokens=4, temperature=0, stream=True)))
    check(r.object == "text_completion", f"object {r.object}")
    c = r.choices[0]
    check(c.finish_reason in ("length", "stop"), f"finish_reason {c.finish_reason}")
    check(r.usage.prompt_tokens == len(prompt_ids),
          f"usage.prompt_tokens {r.usage.prompt_tokens} != tokenized prompt length {len(prompt_ids)}")
    if c.finish_reason == "length":
        check(r.usage.completion_tokens == N, f"finish length but completion_tokens {r.usage.completion_tokens} != {N}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "total_tokens")
    check(len(c.text) > 0, "empty greedy completion")
    whole = c.text

    # Greedy streamed == non-streamed, streamed usage == non-streamed usage.
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    check(text == whole, f"streamed greedy text {text!r} != non-streamed {whole!r}")
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    check(finals == [c.finish_reason], f"streamed finish reasons {finals}, want [{c.finish_reason}]")
    usage = [ch.usage for ch in chunks if ch.usage is not None]
    check(len(usage) == 1, f"{len(usage)} usage chunks with include_usage")
    check(not chunks[-1].choices and chunks[-1].usage is not None, "the usage chunk is not last / has choices")
    u = usage[0]
    check((u.prompt_tokens, u.completion_tokens, u.total_tokens) ==
          (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens),
          f"streamed usage {u} != non-streamed {r.usage}")
    # Without include_usage: no usage chunk.
    check(all(ch.usage is None for ch in chunks_nu), "usage chunk sent without stream_options.include_usage")
    stats["whole"] = whole
    stats["requests"] += 4


def test_completion_logprobs(client, stats):
    mid = stats["model_id"]
    k = 5
    r, chunks, r_sampled = par(
        lambda: client.completions.create(model=mid, prompt=PROMPT, max_tokens=N, temperature=0, logprobs=k),
        lambda: list(client.completions.create(model=mid, prompt=PROMPT, max_tokens=N, temperature=0, logprobs=k,
                                               stream=True)),
        lambda: client.completions.create(model=mid, prompt=PROMPT, max_tokens=N, temperature=1.0, seed=7,
                                          logprobs=k))
    c = r.choices[0]
    check(c.text == stats["whole"], "logprobs changed the greedy text")
    lp = c.logprobs
    check(lp is not None, "no logprobs object")
    n = len(lp.tokens)
    check(n == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset), "logprobs arrays differ in length")
    want_n = r.usage.completion_tokens - (1 if c.finish_reason == "stop" else 0)
    check(n == want_n, f"{n} logprob entries for {r.usage.completion_tokens} completion tokens ({c.finish_reason})")
    check("".join(lp.tokens) == c.text, f"tokens {lp.tokens} do not join to the text {c.text!r}")
    off = 0
    for i in range(n):
        check(lp.text_offset[i] == off, f"text_offset[{i}] {lp.text_offset[i]} != {off}")
        off += len(lp.tokens[i].encode("utf-8"))
        v = lp.token_logprobs[i]
        check(v <= 0.0, f"token_logprobs[{i}] = {v} > 0")
        top = lp.top_logprobs[i]
        check(len(top) == k, f"top_logprobs[{i}] has {len(top)} entries, want {k}: {top}")
        # A JSON object: its order is the server's map order, so compare sorted values.
        vals = sorted(top.values(), reverse=True)
        check_descending(vals, f"top_logprobs[{i}]")
        # Greedy: the sampled token is the most likely one.
        check(lp.tokens[i] in top and abs(top[lp.tokens[i]] - v) < 1e-4 and abs(vals[0] - v) < 1e-4,
              f"greedy token {lp.tokens[i]!r} ({v}) is not the top entry of {top}")

    # Streamed logprobs: the entries, concatenated, equal the whole answer's.
    toks, vals = [], []
    for ch in chunks:
        if ch.choices and ch.choices[0].logprobs is not None:
            toks += ch.choices[0].logprobs.tokens
            vals += ch.choices[0].logprobs.token_logprobs
    check(toks == lp.tokens, f"streamed logprob tokens {toks} != {lp.tokens}")
    check(all(abs(a - b) < 1e-5 for a, b in zip(vals, lp.token_logprobs)), "streamed logprob values differ")

    # Sampled (temperature 1): the sampled token's logprob is <= the best alternative and
    # matches its own entry when listed.
    lp = r_sampled.choices[0].logprobs
    for i, t in enumerate(lp.tokens):
        top = lp.top_logprobs[i]
        check(len(top) == k, f"sampled: top_logprobs[{i}] has {len(top)} entries")
        check(lp.token_logprobs[i] <= max(top.values()) + 1e-5, f"sampled token {t!r} beats the top entry")
        if t in top:
            check(abs(top[t] - lp.token_logprobs[i]) < 1e-4, f"sampled token {t!r}: {lp.token_logprobs[i]} vs {top[t]}")
    stats["requests"] += 3


def test_chat(client, stats):
    mid = stats["model_id"]
    messages = [{"role": "system", "content": "Answer in one short sentence."},
                {"role": "user", "content": "What is the capital of France?"}]
    k = 3
    r, chunks, r2, chunks_lp, r3 = par(
        lambda: client.chat.completions.create(model=mid, messages=messages, max_tokens=N, temperature=0),
        lambda: list(client.chat.completions.create(model=mid, messages=messages, max_tokens=N, temperature=0,
                                                    stream=True, stream_options={"include_usage": True})),
        lambda: client.chat.completions.create(model=mid, messages=messages, max_tokens=N, temperature=0,
                                               logprobs=True, top_logprobs=k),
        lambda: list(client.chat.completions.create(model=mid, messages=messages, max_tokens=N, temperature=0,
                                                    logprobs=True, top_logprobs=k, stream=True)),
        lambda: client.chat.completions.create(model=mid, messages=messages, max_tokens=4, temperature=0))
    check(r.object == "chat.completion", f"object {r.object}")
    msg = r.choices[0].message
    check(msg.role == "assistant" and isinstance(msg.content, str) and msg.content, f"message {msg}")
    want_prompt = len(tokenize_chat(messages))
    check(r.usage.prompt_tokens == want_prompt, f"chat prompt_tokens {r.usage.prompt_tokens} != {want_prompt}")
    if r.choices[0].finish_reason == "length":
        check(r.usage.completion_tokens == N, f"chat completion_tokens {r.usage.completion_tokens}")

    check(chunks[0].object == "chat.completion.chunk", f"chunk object {chunks[0].object}")
    check(chunks[0].choices[0].delta.role == "assistant", f"first chunk has no role assistant: {chunks[0]}")
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(text == msg.content, f"streamed chat {text!r} != non-streamed {msg.content!r}")
    usage = [ch.usage for ch in chunks if ch.usage is not None]
    check(len(usage) == 1 and usage[0].prompt_tokens == r.usage.prompt_tokens and
          usage[0].completion_tokens == r.usage.completion_tokens, f"streamed chat usage {usage} vs {r.usage}")

    # Chat logprobs: logprobs=True + top_logprobs.
    check(r2.choices[0].message.content == msg.content, "logprobs changed the greedy chat text")
    content = r2.choices[0].logprobs.content
    check(content, "no chat logprobs content")
    check("".join(e.token for e in content) == msg.content, "chat logprob tokens do not join to the content")
    for i, e in enumerate(content):
        check(e.logprob <= 0.0, f"chat logprob[{i}] {e.logprob} > 0")
        check(len(e.top_logprobs) == k, f"chat top_logprobs[{i}] has {len(e.top_logprobs)}, want {k}")
        check_descending([t.logprob for t in e.top_logprobs], f"chat top_logprobs[{i}]")
        check(e.top_logprobs[0].token == e.token and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4,
              f"greedy chat token {e.token!r} is not top-1 {e.top_logprobs[0]}")
        check(bytes(e.bytes) == e.token.encode("utf-8"), f"chat logprob bytes {e.bytes} != token {e.token!r}")
    # Streamed chat logprobs.
    toks = [e.token for ch in chunks_lp if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    check(toks == [e.token for e in content], f"streamed chat logprob tokens {toks}")
    # logprobs=False: none.
    check(r3.choices[0].logprobs is None, "logprobs returned without asking")
    stats["requests"] += 5


def pick_stop(tokens, text):
    """A stop string spanning a token boundary (end of token i, start of token i+1), whose
    first occurrence is at that boundary. Returns (stop, prefix) or None."""
    pos = 0
    for i in range(len(tokens) - 1):
        pos += len(tokens[i])
        a, b = tokens[i], tokens[i + 1]
        if i < 2 or len(a.strip()) < 1 or len(b.strip()) < 1:
            continue
        left = a[-2:] if len(a) >= 2 else a
        right = b[:2] if len(b) >= 2 else b
        stop = left + right
        start = pos - len(left)
        if text.find(stop) == start and len(stop) >= 2:
            return stop, text[:start]
    return None


def test_stop_strings(client, stats):
    mid = stats["model_id"]
    messages = [{"role": "user", "content": "Count from one to ten in words, separated by commas."}]
    r, r_chat = par(
        lambda: client.completions.create(model=mid, prompt=PROMPT, max_tokens=SN, temperature=0, logprobs=0),
        lambda: client.chat.completions.create(model=mid, messages=messages, max_tokens=SN, temperature=0))
    full = r.choices[0].text
    tokens = r.choices[0].logprobs.tokens
    picked = pick_stop(tokens, full)
    check(picked is not None, f"no stop string spanning tokens found in {tokens}")
    stop, prefix = picked
    stats["stop"] = stop
    never = tokens[3] + tokens[4] + "\u2603never"
    content = r_chat.choices[0].message.content
    cut = content[4:7]
    stop_lists = ([stop], ["never-there-1", stop, "never-there-2", "\u00e9\u00e9\u00e9"])
    calls = []
    for stops in stop_lists:
        calls.append(lambda stops=stops: client.completions.create(model=mid, prompt=PROMPT, max_tokens=SN,
                                                                   temperature=0, stop=stops))
        calls.append(lambda stops=stops: list(client.completions.create(model=mid, prompt=PROMPT, max_tokens=SN,
                                                                        temperature=0, stop=stops, stream=True)))
    calls.append(lambda: client.completions.create(model=mid, prompt=PROMPT, max_tokens=SN, temperature=0, stop=never))
    calls.append(lambda: list(client.completions.create(model=mid, prompt=PROMPT, max_tokens=SN, temperature=0,
                                                        stop=never, stream=True)))
    calls.append(lambda: client.chat.completions.create(model=mid, messages=messages, max_tokens=SN, temperature=0,
                                                        stop=[cut]))
    results = par(*calls)
    for j, stops in enumerate(stop_lists):
        r, chunks = results[2 * j], results[2 * j + 1]
        c = r.choices[0]
        check(c.text == prefix, f"stop {stops!r}: text {c.text!r}, want {prefix!r} (full {full!r})")
        check(c.finish_reason == "stop", f"stop {stops!r}: finish_reason {c.finish_reason}")
        pieces = [ch.choices[0].text for ch in chunks if ch.choices]
        joined = "".join(pieces)
        check(joined == prefix, f"streamed stop {stops!r}: {joined!r}, want {prefix!r}")
        check(all(stop not in p for p in pieces), "a chunk holds the stop string")
        check(stop not in joined and not any(joined.endswith(stop[:k]) and not prefix.endswith(stop[:k])
                                             for k in range(1, len(stop))), "streamed text holds part of the stop string")
        finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        check(finals == ["stop"], f"streamed stop finish reasons {finals}")
    # A stop string that starts like the output but never completes: the held-back text must
    # come out in full at the end.
    r, chunks, r2 = results[-3:]
    check(r.choices[0].text == full, f"a never-matching stop string changed the text: {r.choices[0].text!r} vs {full!r}")
    joined = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    check(joined == full, f"streamed never-matching stop: {joined!r} vs {full!r}")
    # Chat with a stop string.
    check(len(content) > 8, f"chat answer too short for the stop test: {content!r}")
    start = content.find(cut)
    check(r2.choices[0].message.content == content[:start] and r2.choices[0].finish_reason == "stop",
              f"chat stop {cut!r}: {r2.choices[0].message.content!r}, want {content[:start]!r}")
    stats["requests"] += 9


def test_seeds(client, stats):
    mid = stats["model_id"]
    kw = dict(model=mid, prompt="Once upon a time", max_tokens=N, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    # top_k/min_p are llama-server extensions: pass through extra_body.
    extra = {k: kw.pop(k) for k in ("top_k", "min_p")}
    msgs = [{"role": "user", "content": "Tell me a story."}]
    res = par(*[lambda s=s: client.completions.create(seed=s, extra_body=extra, **kw).choices[0].text
                for s in (1234, 1234, 1, 2, 3)],
              lambda: list(client.completions.create(seed=1234, extra_body=extra, stream=True, **kw)),
              lambda: client.chat.completions.create(model=mid, messages=msgs, max_tokens=N, temperature=1.0, seed=99),
              lambda: client.chat.completions.create(model=mid, messages=msgs, max_tokens=N, temperature=1.0, seed=99))
    a, b, others, chunks, x, y = res[0], res[1], set(res[2:5]), res[5], res[6], res[7]
    check(a == b, f"same seed, different text: {a!r} vs {b!r}")
    check(len(others | {a}) >= 2, f"four seeds gave one text: {a!r}")
    # Streamed with the same seed: same text.
    c = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    check(c == a, f"streamed seeded text {c!r} != {a!r}")
    # Chat, seeded.
    check(x.choices[0].message.content == y.choices[0].message.content, "chat: same seed, different text")
    stats["requests"] += 8


def metric(client, name):
    import urllib.request
    url = str(client.base_url).rstrip("/")[:-len("/v1")] + "/metrics"
    return ss.parse_metrics(urllib.request.urlopen(url, timeout=30).read().decode()).get(name, 0.0)


def test_choices(client, stats):
    """n > 1: choice i is what n = 1 gives with seed + i; usage adds the choices' tokens;
    the choices after the first start from the prompt cache (the prompt is prefilled once);
    streamed choices (indexed deltas, one usage chunk) equal the whole answer."""
    mid = stats["model_id"]
    prompt = "The old lighthouse keeper climbed the stairs every evening, and on the last night of the year he"
    kw = dict(model=mid, prompt=prompt, max_tokens=N, temperature=1.0)
    hits0 = metric(client, "specula_prompt_cache_hit_tokens_total")
    r = client.completions.create(n=3, seed=4242, **kw)
    hits = metric(client, "specula_prompt_cache_hit_tokens_total") - hits0
    check([c.index for c in r.choices] == [0, 1, 2], f"indexes {[c.index for c in r.choices]}")
    alone = [client.completions.create(n=1, seed=4242 + i, **kw) for i in range(3)]
    for i in range(3):
        check(r.choices[i].text == alone[i].choices[0].text, f"choice {i}: {r.choices[i].text!r} != seed+{i} alone "
                                                             f"{alone[i].choices[0].text!r}")
    check(r.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone),
          f"usage {r.usage} vs {[a.usage for a in alone]}")
    n_prompt = r.usage.prompt_tokens
    check(hits >= 2 * (n_prompt - 1), f"choices 1, 2 did not start from the cached prompt: {hits} hit tokens, "
                                      f"prompt {n_prompt}")
    msgs = [{"role": "user", "content": "Name an animal."}]
    whole = client.chat.completions.create(model=mid, messages=msgs, max_tokens=N, temperature=1.0, seed=7, n=2)
    texts, finish, usage = {}, {}, None
    for chunk in client.chat.completions.create(model=mid, messages=msgs, max_tokens=N, temperature=1.0, seed=7, n=2,
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            check(usage is None, "two usage chunks")
            usage = chunk.usage
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    check(texts == {c.index: c.message.content for c in whole.choices}, f"streamed {texts} vs {whole.choices}")
    check(finish == {c.index: c.finish_reason for c in whole.choices}, f"finish {finish}")
    check(usage is not None and usage.completion_tokens == whole.usage.completion_tokens, f"usage {usage}")
    try:
        client.completions.create(model=mid, prompt="hi", max_tokens=4, n=17)
        raise ss.TestFailure("n=17 was accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "'n'" in str(e), f"n=17: {e}")
    stats["requests"] += 8
    stats["choices"] = f"n=3 == seeds +0/+1/+2 alone, {int(hits)} prompt tokens from the cache"


def test_echo(client, stats):
    """echo: the answer starts with the prompt; with logprobs, the prompt's tokens lead the
    entries (the first: null) and each prompt token's logprob is the model's for it given
    the tokens before — checked against generation: the logprobs greedy decoding gave its
    tokens equal the prompt logprobs of the same tokens sent back as a prompt."""
    mid = stats["model_id"]
    prompt = "The capital of France is"
    g = client.completions.create(model=mid, prompt=prompt, max_tokens=6, temperature=0, logprobs=2)
    gen = g.choices[0]
    e = client.completions.create(model=mid, prompt=prompt, max_tokens=6, temperature=0, echo=True)
    check(e.choices[0].text == prompt + gen.text, f"echo text {e.choices[0].text!r}")
    # The prompt + the generated tokens as ids, echoed with logprobs.
    import urllib.request
    base = str(client.base_url).rstrip("/")[:-len("/v1")]

    def tokenize(text, add_special):
        req = urllib.request.Request(base + "/tokenize", json.dumps({"content": text, "add_special": add_special}).encode(),
                                     {"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req, timeout=30).read())["tokens"]
    p_ids, g_ids = tokenize(prompt, True), tokenize(gen.text, False)
    check(len(g_ids) == len(gen.logprobs.tokens), f"retokenized {g_ids} vs {gen.logprobs.tokens}")
    r = client.completions.create(model=mid, prompt=p_ids + g_ids, max_tokens=1, temperature=0, logprobs=2, echo=True)
    lp = r.choices[0].logprobs
    n = len(p_ids) + len(g_ids)
    check(len(lp.tokens) == n + 1 and lp.token_logprobs[0] is None, f"echo entries {lp.tokens} {lp.token_logprobs}")
    check(all(isinstance(v, float) for v in lp.token_logprobs[1:]), f"prompt logprobs {lp.token_logprobs}")
    for k, want in enumerate(gen.logprobs.token_logprobs):
        got = lp.token_logprobs[len(p_ids) + k]
        check(abs(got - want) <= 1e-4, f"prompt logprob of generated token {k}: {got} vs {want}")
    check(all(len(t) == 2 for t in lp.top_logprobs[1:]), f"top_logprobs {lp.top_logprobs[:3]}")
    check(r.choices[0].text.startswith(prompt + gen.text), f"echo ids text {r.choices[0].text!r}")
    # Streamed: the same text and entries.
    text, toks, vals = "", [], []
    for ch in client.completions.create(model=mid, prompt=p_ids + g_ids, max_tokens=1, temperature=0, logprobs=2,
                                        echo=True, stream=True):
        for c in ch.choices:
            text += c.text
            if c.logprobs:
                toks += c.logprobs.tokens
                vals += c.logprobs.token_logprobs
    check(text == r.choices[0].text and toks == lp.tokens and vals == lp.token_logprobs,
          f"streamed echo {text!r} {toks} vs {r.choices[0].text!r} {lp.tokens}")
    try:
        client.chat.completions.create(model=mid, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       extra_body={"echo": True})
        raise ss.TestFailure("chat echo accepted")
    except openai.BadRequestError as ex:
        check("echo" in str(ex), f"chat echo: {ex}")
    stats["requests"] += 5


def test_xtc_dry(client, stats):
    """llama-server's XTC and DRY fields: DRY (greedy) stops a repeated sequence from going
    on, a breaker inside it lets it go on again; XTC changes a seeded sample and stays
    reproducible; out-of-range values are refused naming the field."""
    mid = stats["model_id"]
    p = "one two three one two three one two three one two three one two three"
    kw = dict(model=mid, prompt=p, max_tokens=8, temperature=0)
    plain = client.completions.create(**kw).choices[0].text
    dry = client.completions.create(extra_body={"dry_multiplier": 2.0}, **kw).choices[0].text
    broken = client.completions.create(extra_body={"dry_multiplier": 2.0, "dry_sequence_breakers": [" two"]},
                                       **kw).choices[0].text
    check(plain.startswith(" one two three"), f"plain {plain!r}")
    check(not dry.startswith(" one two three one"), f"DRY let the repeat go on: {dry!r}")
    check(broken == plain, f"a breaker in every repeat: {broken!r} != {plain!r}")
    kw = dict(model=mid, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=3)
    a = [client.completions.create(extra_body={"xtc_probability": 1.0, "xtc_threshold": 0.05}, **kw).choices[0].text
         for _ in range(2)]
    b = client.completions.create(**kw).choices[0].text
    check(a[0] == a[1] and a[0] != b, f"XTC: {a} vs off {b!r}")
    for field, value in (("xtc_probability", 2), ("xtc_threshold", -1), ("dry_multiplier", -1),
                         ("dry_allowed_length", -1), ("dry_penalty_last_n", -2), ("dry_sequence_breakers", []),
                         ("dry_sequence_breakers", [""])):
        try:
            client.completions.create(model=mid, prompt="x", max_tokens=1, extra_body={field: value})
            raise ss.TestFailure(f"{field}={value} accepted")
        except openai.BadRequestError as e:
            check(field in str(e), f"{field}: {e}")
    stats["requests"] += 13


def test_refusals(client, stats):
    mid = stats["model_id"]
    # A server of one model answers any name (as llama-server), naming the served model.
    r = client.completions.create(model="gpt-4", prompt="hi", max_tokens=4)
    check(r.model == mid, f"answer to model 'gpt-4' names {r.model}, not {mid}")
    stats["requests"] += 1


def main():
    ss.require_model()
    stats = {"timings": [], "requests": 0, "model_id": "gemma-3-270m-q4_k_m"}
    check(os.path.exists(ss.gemma_template()), f"missing {ss.gemma_template()}")
    with ss.Server("--parallel", "4", "--ctx", "2048", "--chat-template-file", ss.gemma_template()) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        for t in (test_models, test_completions, test_completion_logprobs, test_chat, test_stop_strings, test_seeds,
                  test_choices, test_echo, test_xtc_dry, test_refusals):
            t0 = time.time()
            t(client, stats)
            stats["timings"].append(f"{t.__name__[5:]} {time.time() - t0:.1f}s")
        client.close()  # no idle keep-alive connection left to hold up the shutdown

    # Second server: API key, and no chat template.
    key = "sk-test-0123456789"
    with ss.Server("--parallel", "1", "--ctx", "256", "--api-key", key, "--alias", "tiny") as srv:
        good = openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, timeout=120)
        bad = openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-wrong", max_retries=0, timeout=120)
        check([m.id for m in good.models.list().data] == ["tiny"], "--alias not served")
        for what, call in (("models", lambda: bad.models.list()),
                           ("completions", lambda: bad.completions.create(model="tiny", prompt="hi", max_tokens=2)),
                           ("chat", lambda: bad.chat.completions.create(
                               model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2))):
            try:
                call()
                raise ss.TestFailure(f"wrong key accepted on {what}")
            except openai.AuthenticationError as e:
                check(e.status_code == 401, f"{what}: {e.status_code}")
        for path in ("/v1/models", "/metrics"):
            status, _, body = srv.request("GET", path)
            ss.check_error_body(status, body, 401, f"GET {path} without a key")
        status, _, body = srv.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})
        ss.check_error_body(status, body, 401, "POST without a key")
        status, _, body = srv.post("/v1/completions", {"prompt": "hi", "max_tokens": 2},
                                   headers={"Authorization": "Bearer " + key + "x"})
        ss.check_error_body(status, body, 401, "POST with a longer key")
        status, _, body = srv.request("GET", "/health")
        check(status == 200 and json.loads(body)["status"] == "ok", f"/health without a key: {status} {body!r}")
        r = good.completions.create(model="tiny", prompt="hi", max_tokens=2, temperature=0)
        check(r.usage.completion_tokens >= 1, "right key: no completion")
        # No chat template: 400 with a clear message.
        try:
            good.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            raise ss.TestFailure("chat without a template answered 200")
        except openai.BadRequestError as e:
            check(e.status_code == 400 and "chat template" in str(e) and "--chat-template-file" in str(e),
                  f"chat without a template: {e}")
        stats["requests"] += 10
        good.close()
        bad.close()
    return f"{stats['requests']} requests, stop string {stats['stop']!r}; " + ", ".join(stats["timings"])


if __name__ == "__main__":
    ss.run_main("test_openai_client", main)
