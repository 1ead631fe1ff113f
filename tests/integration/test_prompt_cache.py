#!/usr/bin/env python3
"""tests/integration/test_prompt_cache.py — `specula serve`'s prompt cache over real HTTP.

  * a repeated 600-token prompt is served from the cache: usage.prompt_tokens_details.
    cached_tokens (whole and streamed responses), the same text as the first time, and
    /metrics counts the hit;
  * a chat-style continuation (prompt + answer + more) reuses the previous request's state;
  * POST /admin/cache/flush makes the disk tier durable; after a restart on the same
    --cache-dir the prompt is served from disk with the same text;
  * SIGKILL while entries are being written, then a restart: the server starts, no damaged
    entry is ever loaded, answers stay exact;
  * --generation-checkpoint: a sampled generation killed (SIGKILL) midway continues after a
    restart to exactly the text of an uninterrupted run;
  * a flipped byte in an entry file is caught by its checksum (counted, not loaded);
  * the disk tier keeps to --cache-disk;
  * two servers on one --cache-dir (replicas) serve each other's entries, exactly.
Exits 77 (skip) without the model.
"""
import os
import shutil
import signal
import tempfile
import threading
import time

import specula_server as ss
from specula_server import check


def words(n, seed):
    import random
    r = random.Random(seed)
    return [2] + [r.randrange(1000, 30000) for _ in range(n - 1)]


def complete(srv, prompt, n=12, stream=False):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        status, _, _, events = srv.stream("/v1/completions", body, timeout=300)
        check(status == 200, f"stream status {status}")
        import json
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
        usage = [c["usage"] for c in chunks if c.get("usage")][-1]
        return text, usage
    status, _, j = srv.post_json("/v1/completions", body, timeout=300)
    check(status == 200, f"status {status}: {j}")
    return j["choices"][0]["text"], j["usage"]


def main():
    ss.require_model()
    tmp = tempfile.mkdtemp(prefix="specula_pc_it_")
    cache_dir = os.path.join(tmp, "cache")
    try:
        p1 = words(600, 1)
        # ---- RAM hit, continuation, flush ----
        with ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", cache_dir) as srv:
            t1, u1 = complete(srv, p1)
            check(u1["prompt_tokens_details"]["cached_tokens"] == 0, f"cold request reported cached tokens: {u1}")
            t2, u2 = complete(srv, p1)
            check(t2 == t1, "a cached response differs from the cold one")
            check(u2["prompt_tokens_details"]["cached_tokens"] == 599, f"usage of a repeated prompt: {u2}")
            t3, u3 = complete(srv, p1, stream=True)
            check(t3 == t1, "a streamed cached response differs")
            check(u3["prompt_tokens_details"]["cached_tokens"] == 599, f"streamed usage: {u3}")
            p2 = words(300, 2)
            a2, _ = complete(srv, p2, n=8)
            cont = p2 + ss.tokenize(a2, parse_special=False)[1:] + words(40, 3)[1:]
            _, uc = complete(srv, cont, n=8)
            check(uc["prompt_tokens_details"]["cached_tokens"] >= 300,
                  f"a continuation did not reuse the previous request: {uc}")
            m = srv.metrics()
            check(m.get('specula_prompt_cache_lookups_total{result="hit"}', 0) >= 3, "hits not counted")
            check(m.get("specula_prompt_cache_hit_tokens_total", 0) >= 2 * 599 + 300, "hit tokens not counted")
            status, _, j = srv.post_json("/admin/cache/flush", {})
            check(status == 200 and j.get("flushed") is True, f"flush: {status} {j}")
            check(j["disk_entries"] >= 2, f"nothing on disk after a flush: {j}")
        # ---- restart: served from disk ----
        with ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", cache_dir) as srv:
            t4, u4 = complete(srv, p1)
            check(t4 == t1, "the response after a restart differs")
            check(u4["prompt_tokens_details"]["cached_tokens"] == 599, f"after restart: {u4}")
            m = srv.metrics()
            check(m.get('specula_prompt_cache_disk_io_total{op="read"}', 0) >= 1, "no disk read counted")
            check(m.get("specula_prompt_cache_disk_rejected_total", 0) == 0, "a good file was rejected")
        # ---- SIGKILL during writes ----
        killed_dir = os.path.join(tmp, "killed")
        srv = ss.Server("--parallel", "4", "--ctx", "8192", "--cache-dir", killed_dir).start()
        prompts = [words(700, 10 + i) for i in range(4)]
        threads = [threading.Thread(target=lambda p=p: srv.post("/v1/completions", {"prompt": p, "max_tokens": 4,
                                                                                  "temperature": 0}, timeout=300))
                   for p in prompts]
        for t in threads:
            t.start()
        deadline = time.time() + 120
        while time.time() < deadline:  # kill once some entries have been written
            m = srv.metrics()
            if m.get('specula_prompt_cache_disk_io_total{op="write"}', 0) >= 1:
                break
            time.sleep(0.05)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait()
        for t in threads:
            t.join(60)
        with ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", killed_dir) as srv2:
            m = srv2.metrics()
            check(m.get("specula_prompt_cache_disk_rejected_total", 0) == 0,
                  "an entry written before SIGKILL was damaged (atomic writes should prevent it)")
            leftovers = [f for f in os.listdir(killed_dir) if ".tmp." in f]
            check(not leftovers, f"temporary files survive a restart: {leftovers}")
        with ss.Server("--parallel", "2", "--ctx", "4096") as cold, \
                ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", killed_dir) as warm:
            for p in prompts[:2]:
                tc, _ = complete(cold, p, n=6)
                tw, _ = complete(warm, p, n=6)
                check(tw == tc, "an answer after the SIGKILL restart differs from a cold one")
        # ---- resume after SIGKILL (--generation-checkpoint) ----
        gen_dir = os.path.join(tmp, "gen")
        pr = words(200, 40)
        body = {"prompt": pr, "max_tokens": 64, "temperature": 0.7, "seed": 5, "ignore_eos": True}
        with ss.Server("--parallel", "2", "--ctx", "4096") as cold:
            status, _, want = cold.post_json("/v1/completions", body, timeout=300)
            check(status == 200, f"cold run: {status}")
        srv = ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", gen_dir,
                        "--generation-checkpoint", "8").start()
        th = threading.Thread(target=lambda: srv.post("/v1/completions", body, timeout=300))
        th.start()
        deadline = time.time() + 120
        while time.time() < deadline:
            m = srv.metrics()
            if m.get("specula_prompt_cache_generation_checkpoints", 0) >= 1 and \
                    m.get("specula_prompt_cache_disk_pending", 1) == 0 and \
                    m.get('specula_prompt_cache_disk_io_total{op="write"}', 0) >= 2:
                break
            time.sleep(0.05)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait()
        th.join(60)
        with ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", gen_dir, "--generation-checkpoint", "8") as srv2:
            status, _, got = srv2.post_json("/v1/completions", body, timeout=300)
            check(status == 200, f"resumed run: {status}")
            check(got["choices"][0]["text"] == want["choices"][0]["text"],
                  "the resumed generation differs from an uninterrupted one")
            check(got["usage"]["completion_tokens"] == 64, f"usage after resume: {got['usage']}")
            check(got["usage"]["prompt_tokens_details"]["cached_tokens"] == 200, f"not resumed: {got['usage']}")
        # ---- a flipped byte ----
        files = sorted(f for f in os.listdir(cache_dir) if f.endswith(".spc"))
        check(files, "no cache files")
        for f in files:
            path = os.path.join(cache_dir, f)
            with open(path, "r+b") as fh:
                fh.seek(os.path.getsize(path) - 64)
                b = fh.read(1)
                fh.seek(os.path.getsize(path) - 64)
                fh.write(bytes([b[0] ^ 0x20]))
        with ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", cache_dir) as srv:
            t5, u5 = complete(srv, p1)
            check(t5 == t1, "the response with a damaged cache differs")
            check(u5["prompt_tokens_details"]["cached_tokens"] == 0, f"a damaged entry was used: {u5}")
            m = srv.metrics()
            check(m.get("specula_prompt_cache_disk_rejected_total", 0) >= 1, "the damaged file was not counted")
        # ---- the disk cap ----
        cap_dir = os.path.join(tmp, "cap")
        with ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", cap_dir, "--cache-ram", "0",
                       "--cache-disk", "40") as srv:
            for i in range(6):
                complete(srv, words(500, 20 + i), n=2)
            srv.post_json("/admin/cache/flush", {})
            total = sum(os.path.getsize(os.path.join(cap_dir, f)) for f in os.listdir(cap_dir))
            check(total <= 40 << 20, f"the disk tier holds {total} bytes, over its 40 MiB cap")
            m = srv.metrics()
            check(m.get('specula_prompt_cache_evictions_total{tier="disk"}', 0) >= 1, "no disk eviction counted")
        # ---- two replicas sharing one --cache-dir ----
        shared = os.path.join(tmp, "shared")
        with ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", shared) as a, \
                ss.Server("--parallel", "2", "--ctx", "4096", "--cache-dir", shared) as b:
            p7 = words(500, 7)
            t7a, _ = complete(a, p7)
            a.post_json("/admin/cache/flush", {})
            time.sleep(1.2)  # b lists the folder again at most once a second
            t7b, u7b = complete(b, p7)
            check(t7b == t7a, "the replica reading the other's entry answered differently")
            check(u7b["prompt_tokens_details"]["cached_tokens"] >= 490, f"b did not use a's entry: {u7b}")
            # Both write entries at once, then each reads the other's: nothing rejected.
            threads = [threading.Thread(target=complete, args=(srv, words(300, 40 + i), 2)) for i, srv in
                       enumerate([a, b, a, b])]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for srv in (a, b):
                srv.post_json("/admin/cache/flush", {})
            time.sleep(1.2)
            for i, srv in enumerate([b, a, b, a]):
                _, u = complete(srv, words(300, 40 + i), 2)
                check(u["prompt_tokens_details"]["cached_tokens"] >= 290, f"entry {i} not shared: {u}")
            for srv in (a, b):
                m = srv.metrics()
                check(m.get("specula_prompt_cache_disk_rejected_total", 0) == 0, "a shared entry was rejected")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return "RAM hit, continuation, restart, SIGKILL, resume, checksum, disk cap, shared folder"


if __name__ == "__main__":
    ss.run_main("test_prompt_cache", main)
