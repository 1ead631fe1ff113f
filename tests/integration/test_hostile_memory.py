"""tests/integration/test_hostile_memory.py — the server's memory stays bounded under
prompts made of one huge word.

300 `/v1/completions` requests whose prompt is a single ~1 MiB word (one letter repeated,
each request its own letter mix so no two are equal), 8 at a time, against `specula serve`
with a 2 MiB body limit. Each must be answered (a 400 "exceeds the context" refusal is the
expected answer: the word tokenizes to far more tokens than the context) in bounded time,
and after the run the server's resident memory (/metrics process_resident_memory_bytes)
must be at most 64 MiB above its figure after a warm-up request, the tokenizer's scratch
(specula_tokenizer_scratch_bytes) at most 16 MiB, and a normal request must still be
answered. Tokenization of a 1 MiB word must not be quadratic: every request is answered
within 30 s. With the CI model (Gemma, a SentencePiece vocabulary) this checks the
allocator setting; with a BPE model (Qwen2.5, SPECULA_MODEL) also the BPE scratch release
(tests/tokenizer/bpe_test.cpp checks that one directly).
Env: SPECULA_HOSTILE_N (default 300).
Exit 0 pass, 1 fail, 77 skip (no model).
"""

import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

N = int(os.environ.get("SPECULA_HOSTILE_N", "300"))
WORD = 1 << 20
LIMIT_MB = 64


def body(i):
    r = random.Random(i)
    a, b = r.choice("abcdefghijklmnopqrstuvwxyz"), r.choice("abcdefghijklmnopqrstuvwxyz")
    cut = r.randrange(1, WORD)
    return {"prompt": a * cut + b * (WORD - cut), "max_tokens": 2}


def main():
    ss.require_model()
    with ss.Server("--parallel", "2", "--ctx", "2048", "--queue", "16", "--max-body", str(2 << 20)) as srv:
        status, _, j = srv.post_json("/v1/completions", body(-1), timeout=120)
        check(status == 400, f"warm-up: a 1 MiB word answered {status}: {j}")
        time.sleep(0.5)
        idle = srv.metrics()["process_resident_memory_bytes"]
        worst = [0.0]
        statuses = {}
        lock = threading.Lock()

        def one(i):
            t0 = time.time()
            status, _, data = srv.post("/v1/completions", json.dumps(body(i)).encode(), timeout=120)
            dt = time.time() - t0
            with lock:
                worst[0] = max(worst[0], dt)
                statuses[status] = statuses.get(status, 0) + 1
            return status, data

        t0 = time.time()
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(one, range(N)))
        wall = time.time() - t0
        for status, data in results:
            check(status == 400 and b"context" in data, f"a 1 MiB word answered {status}: {data[:200]!r}")
        time.sleep(0.5)
        m = srv.metrics()
        rss, scratch = m["process_resident_memory_bytes"], m["specula_tokenizer_scratch_bytes"]
        growth = (rss - idle) / 2**20
        print(f"{N} requests of a {WORD}-byte word, 8 at a time: {wall:.1f} s, slowest {worst[0]:.2f} s; "
              f"RSS after warm-up {idle / 2**20:.0f} MiB, after the run {rss / 2**20:.0f} MiB "
              f"(+{growth:.1f} MiB); tokenizer scratch {scratch / 2**20:.2f} MiB; statuses {statuses}")
        check(worst[0] < 30, f"a request took {worst[0]:.1f} s")
        check(growth <= LIMIT_MB, f"RSS grew {growth:.1f} MiB over the warm-up figure (limit {LIMIT_MB})")
        check(scratch <= 16 * 2**20, f"tokenizer scratch holds {scratch / 2**20:.1f} MiB after the run")
        status, _, j = srv.post_json("/v1/completions", {"prompt": "Hello", "max_tokens": 4, "temperature": 0})
        check(status == 200 and j["choices"][0]["text"] is not None, f"a normal request after the run: {status} {j}")
    return (f"{N} requests in {wall:.1f} s (slowest {worst[0]:.2f} s), RSS +{growth:.1f} MiB, "
            f"scratch {scratch / 2**20:.2f} MiB")


if __name__ == "__main__":
    ss.run_main("test_hostile_memory", main)
