"""tests/integration/test_concurrency.py — 32 clients at once (threads, the official openai
client) against `specula serve --parallel 8`: mixed prompt lengths (a few tokens up to
~600, so some prompts need several prefill chunks), greedy and seeded sampled requests,
completions and chat, max_tokens 16..32; a third of the clients stream and disconnect
after a few chunks. Every other request's text, finish reason and token count must equal
byte for byte those of the same request run alone first (batch invariance). After the
storm /metrics must show 0 running rows and an empty queue within a couple of seconds,
the disconnected streams counted as cancelled, and a final request must still work.
Does not: check error answers (test_raw_http.py) or hostile input (test_fuzz.py).
Env: SPECULA_CONC_CLIENTS (default 32), SPECULA_CONC_PARALLEL (default 8), SPECULA_CONC_TIMEOUT
(seconds per request, default 300).
Exit 0 pass, 1 fail, 77 skip (no model / no openai module).
"""

import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

try:
    import openai
except ImportError:
    ss.skip("the `openai` Python module is not installed (pip install openai==3.51.0)")

N_CLIENTS = int(os.environ.get("SPECULA_CONC_CLIENTS", "32"))
PARALLEL = int(os.environ.get("SPECULA_CONC_PARALLEL", "8"))
TIMEOUT = float(os.environ.get("SPECULA_CONC_TIMEOUT", "300"))  # per client request, seconds
MODEL = "gemma-3-270m-q4_k_m"

SENTENCES = [
    "The river ran quietly past the old mill, where nobody had worked for forty years.",
    "In the morning the market filled with traders selling apples, bread and bright wool.",
    "A small robot learned to paint by watching the light change on the harbour walls.",
    "Mathematics describes patterns, and patterns appear in shells, storms and songs.",
    "She opened the letter slowly, afraid of what the careful handwriting might say.",
]


def make_specs(rng):
    specs = []
    for i in range(N_CLIENTS):
        # Lengths: short, medium and a few long (~600 tokens: > the 512-token step budget).
        kind = i % 4
        n_sent = 38 if i % 8 == 7 else [1, 4, 10, 20][kind]
        text = " ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(n_sent))
        greedy = i % 2 == 0
        spec = {
            "i": i,
            "chat": i % 5 == 3,
            "prompt": f"Request {i}. {text}\nContinue the story:",
            "max_tokens": rng.randint(16, 32),
            "temperature": 0.0 if greedy else 0.9,
            "seed": None if greedy else rng.randint(1, 2 ** 31),
            # A third disconnect mid-stream; of the rest, half stream to the end.
            "disconnect": i % 3 == 2,
            "stream": i % 3 == 1 or (i % 3 == 0 and i % 2 == 0),
        }
        specs.append(spec)
    return specs


def call(client, spec, stream=None):
    """Returns (text, finish_reason, completion_tokens or None)."""
    stream = spec["stream"] if stream is None else stream
    kw = dict(model=MODEL, max_tokens=spec["max_tokens"], temperature=spec["temperature"])
    if spec["seed"] is not None:
        kw["seed"] = spec["seed"]
    if spec["chat"]:
        msgs = [{"role": "user", "content": spec["prompt"]}]
        if not stream:
            r = client.chat.completions.create(messages=msgs, **kw)
            return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens
        chunks = list(client.chat.completions.create(messages=msgs, stream=True,
                                                     stream_options={"include_usage": True}, **kw))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        fin = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        usage = [c.usage for c in chunks if c.usage]
        return text, fin[-1] if fin else None, usage[0].completion_tokens if usage else None
    if not stream:
        r = client.completions.create(prompt=spec["prompt"], **kw)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens
    chunks = list(client.completions.create(prompt=spec["prompt"], stream=True, stream_options={"include_usage": True},
                                            **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    fin = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage]
    return text, fin[-1] if fin else None, usage[0].completion_tokens if usage else None


def disconnect(client, spec):
    """Streams a long request, reads a few chunks, closes the connection."""
    kw = dict(model=MODEL, max_tokens=48, temperature=spec["temperature"], stream=True,
              extra_body={"ignore_eos": True})
    if spec["chat"]:
        s = client.chat.completions.create(messages=[{"role": "user", "content": spec["prompt"]}], **kw)
    else:
        s = client.completions.create(prompt=spec["prompt"], **kw)
    got = 0
    for _ in s:
        got += 1
        if got >= 3:
            break
    s.close()
    return got


def main():
    ss.require_model()
    rng = random.Random(20240611)
    specs = make_specs(rng)
    checked = [s for s in specs if not s["disconnect"]]
    dropped = [s for s in specs if s["disconnect"]]
    with ss.Server("--parallel", str(PARALLEL), "--ctx", str(1024 * PARALLEL), "--queue", str(2 * N_CLIENTS),
                   "--chat-template-file", ss.gemma_template()) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
        # Solo runs, one at a time (always non-streamed: stream == whole is tested too).
        t0 = time.time()
        solo = {s["i"]: call(client, s, stream=False) for s in checked}
        t_solo = time.time() - t0
        m0 = srv.metrics()

        # The storm: everyone starts together.
        barrier = threading.Barrier(len(specs))
        results, errors = {}, []

        def worker(spec):
            c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
            barrier.wait()
            try:
                if spec["disconnect"]:
                    results[spec["i"]] = disconnect(c, spec)
                else:
                    results[spec["i"]] = call(c, spec)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"client {spec['i']}: {type(e).__name__}: {e}")
            finally:
                c.close()

        t1 = time.time()
        with ThreadPoolExecutor(len(specs)) as pool:
            list(pool.map(worker, specs))
        t_storm = time.time() - t1
        check(not errors, "clients failed:\n" + "\n".join(errors))
        mismatches = []
        for s in checked:
            got, want = results[s["i"]], solo[s["i"]]
            if got[0] != want[0] or got[1] != want[1] or (got[2] is not None and got[2] != want[2]):
                mismatches.append(f"request {s['i']} (chat={s['chat']} stream={s['stream']} "
                                  f"T={s['temperature']} seed={s['seed']}): {got!r} != solo {want!r}")
        check(not mismatches, f"{len(mismatches)} requests differ from their solo run:\n" + "\n".join(mismatches))
        check(all(results[s["i"]] >= 1 for s in dropped), "a disconnecting client got no chunk")

        m = srv.wait_idle(3.0)
        key = 'specula_requests_total{outcome="cancelled"}'
        cancelled = m.get(key, 0) - m0.get(key, 0)
        check(cancelled == len(dropped), f"{cancelled:g} requests counted cancelled, {len(dropped)} clients disconnected")
        failed = m.get('specula_requests_total{outcome="failed"}', 0)
        check(failed == 0, f"{failed:g} requests failed")
        r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=4, temperature=0)
        check(r.usage.completion_tokens >= 1, "final request got no tokens")
        steps = m.get("specula_steps_total", 0) - m0.get("specula_steps_total", 0)
        batch_max = m.get("specula_rows", 0)
    return (f"{len(checked)} checked + {len(dropped)} disconnected clients, parallel {PARALLEL}: solo {t_solo:.1f}s, "
            f"storm {t_storm:.1f}s ({steps:g} steps, {batch_max:g} rows), all texts equal solo, "
            f"{cancelled:g} cancelled")


if __name__ == "__main__":
    ss.run_main("test_concurrency", main)
