#!/usr/bin/env python3
"""test_many_models.py — several models in one `specula serve` (server/model_registry.h).

Gemma 3 270M and Qwen2.5-Coder 0.5B (both fetched by ./scripts/test) served by one process:
  * alternating requests name either model; each answer (greedy) equals the answer of a
    server that serves that model alone; /v1/models lists both with their state;
  * a model idle for --models-idle-unload seconds unloads and its memory is freed (the
    process's RSS, read from /proc, falls back near its level before the load);
  * a --models-memory budget that holds one model (the larger one and half the smaller)
    swaps them: after each request exactly the model it named is loaded;
  * concurrent requests for a model being loaded all succeed, and it loads once;
  * an unknown model is a 404 naming the served ones; POST /models/load and /models/unload,
    the latter refused while the model has a request running; GET routes take ?model=; a
    path no route has, and a /metrics scrape, load nothing.
Exits 77 (skip) without both models.
"""
import json
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

GEMMA = "gemma"
QWEN = "qwen"


def rss(proc):
    with open(f"/proc/{proc.pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) * 1024


def complete(srv, model, prompt, n=8, timeout=300):
    st, _, j = srv.post_json("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0},
                             timeout=timeout)
    check(st == 200, f"{model}: {st} {j}")
    return j["choices"][0]["text"]


def states(srv):
    st, _, j = srv.get_json("/v1/models")
    check(st == 200, f"/v1/models {st}")
    return {m["id"]: m["status"]["value"] for m in j["data"]}


def main():
    gemma = ss.model_path()
    qwen = os.path.join(os.path.dirname(gemma), "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    if not os.path.exists(gemma) or not os.path.exists(qwen):
        ss.skip("needs gemma-3-270m-q4_k_m.gguf and qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    prompts = {GEMMA: "The capital of France is", QWEN: "def fibonacci(n):"}
    # The oracle: each model served alone.
    alone = {}
    for name, path in ((GEMMA, gemma), (QWEN, qwen)):
        with ss.Server("--parallel", "2", "--ctx", "2048", model=path) as srv:
            alone[name] = complete(srv, "any", prompts[name])
    stats = []
    models = ["-m", f"{QWEN}={qwen}", "--parallel", "2", "--ctx", "2048"]  # (the helper adds -m first)
    first = f"{GEMMA}={gemma}"

    # 1. Alternating requests, idle unload, concurrent loads, load/unload routes.
    with ss.Server(*models, "--models-idle-unload", "3", model=first) as srv:
        check(states(srv) == {GEMMA: "unloaded", QWEN: "unloaded"}, f"at start: {states(srv)}")
        rss0 = rss(srv.proc)
        for _ in range(2):
            for name in (GEMMA, QWEN):
                got = complete(srv, name, prompts[name])
                check(got == alone[name], f"{name} in a two-model server wrote {got!r}, alone {alone[name]!r}")
        check(states(srv) == {GEMMA: "loaded", QWEN: "loaded"}, f"after requests: {states(srv)}")
        sizes = {m["id"]: m["status"]["bytes"] for m in srv.get_json("/v1/models")[2]["data"]}
        rss_loaded = rss(srv.proc)
        deadline = time.time() + 30
        while states(srv) != {GEMMA: "unloaded", QWEN: "unloaded"}:
            check(time.time() < deadline, f"idle models never unloaded: {states(srv)}")
            time.sleep(0.5)
        rss_idle = rss(srv.proc)
        freed = (rss_loaded - rss_idle) / max(1, rss_loaded - rss0)
        check(freed > 0.8, f"idle unload freed {freed:.0%} of the models' memory "
                           f"(RSS {rss0 >> 20} MiB before, {rss_loaded >> 20} loaded, {rss_idle >> 20} after)")
        stats.append(f"idle unload: RSS {rss0 >> 20} -> {rss_loaded >> 20} -> {rss_idle >> 20} MiB")
        # Concurrent requests for a model that is loading: all answered, one load.
        results = []
        threads = [threading.Thread(target=lambda: results.append(complete(srv, QWEN, prompts[QWEN])))
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        check(len(results) == 6 and all(r == alone[QWEN] for r in results), f"concurrent first requests: {results}")
        loads = srv.stderr().count(f"specula: loading model '{QWEN}'")
        check(loads == 2, f"qwen loaded {loads} times (once at first, once after its idle unload expected)")
        # Unknown model: 404 naming both.
        st, _, data = srv.post("/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]})
        body = json.loads(data)
        check(st == 404 and GEMMA in body["error"]["message"] and QWEN in body["error"]["message"],
              f"unknown model: {st} {body}")
        st, _, data = srv.post("/v1/messages", {"model": "nope", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]})
        check(st == 404 and json.loads(data)["type"] == "error", f"unknown model on /v1/messages: {st} {data[:200]!r}")
        # Explicit load / unload; unload refused while a request runs.
        st, _, j = srv.post_json("/models/load", {"model": GEMMA})
        check(st == 200 and states(srv)[GEMMA] == "loaded", f"/models/load: {st} {j} {states(srv)}")
        long = threading.Thread(target=lambda: complete(srv, GEMMA, "Story:", n=200))
        long.start()
        time.sleep(0.5)
        st, _, j = srv.post_json("/models/unload", {"model": GEMMA})
        check(st == 429 and "running" in j["error"]["message"], f"unload while busy: {st} {j}")
        long.join(300)
        # The lease is released when the handler returns, just after the last byte is written:
        # a client that has its answer may still race it, and retries a 429 as any client would.
        deadline = time.time() + 5
        st, _, j = srv.post_json("/models/unload", {"model": GEMMA})
        while st == 429 and time.time() < deadline:
            time.sleep(0.05)
            st, _, j = srv.post_json("/models/unload", {"model": GEMMA})
        check(st == 200 and states(srv)[GEMMA] == "unloaded", f"/models/unload: {st} {j} {states(srv)}")
        # Neither a path no route has nor a metrics scrape loads a model.
        st, _, _ = srv.post("/no/such/route", {"model": GEMMA})
        st2, _, _ = srv.request("GET", f"/metrics?model={GEMMA}")
        check(st == 404 and st2 == 200 and states(srv)[GEMMA] == "unloaded", f"404 / scrape loaded a model: {states(srv)}")
        st, _, j = srv.get_json(f"/props?model={QWEN}")
        check(st == 200 and j["model_alias"] == QWEN, f"/props?model=: {st} {str(j)[:200]}")
    stats.append("6 concurrent first requests: one load")

    # 2. A budget that holds one model (the larger, and half the smaller): they swap.
    budget_mib = (max(sizes.values()) + min(sizes.values()) // 2) >> 20
    with ss.Server(*models, "--models-memory", str(budget_mib), model=first) as srv:
        for i in range(4):
            name = (GEMMA, QWEN)[i % 2]
            got = complete(srv, name, prompts[name])
            check(got == alone[name], f"{name} under the budget wrote {got!r}")
            want = {GEMMA: "unloaded", QWEN: "unloaded", name: "loaded"}
            check(states(srv) == want, f"after a request for {name} under a {budget_mib} MiB budget: {states(srv)}")
        check(srv.stderr().count("the memory budget needs room") == 3, "expected 3 budget unloads")
    stats.append(f"{budget_mib} MiB budget ({sizes[GEMMA] >> 20} + {sizes[QWEN] >> 20} MiB of models): "
                 "4 alternating requests, 3 swaps")
    return "; ".join(stats)


if __name__ == "__main__":
    ss.run_main("test_many_models", main)
