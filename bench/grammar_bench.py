#!/usr/bin/env python3
"""bench/grammar_bench.py — the cost of structured outputs in `specula serve`.

For each schema of tests/fixtures/structured/schemas.json, one stream at a time:
  constrained   response_format json_schema, greedy, plain decoding;
  free          the same prompt unconstrained, as many tokens (ignore_eos, max_tokens = the
                constrained answer's length), plain decoding;
  constrained+spec  the constrained request with speculation on (--spec ngram: n-gram drafts
                cut at the grammar, the grammar's forced tokens as free drafts).
Reports decode tokens/s of each (the server's own timings), and from /metrics the grammar
worker's time per mask and how long steps waited for it after their forward. Then the same
with 8 concurrent streams (4 constrained, 4 free) for the batched case.
With --llama-server PATH (tools/build_llama_server.sh), the same one-stream loop runs
against llama-server in the same run: its chat route with the same response_format
json_schema (llama.cpp turns it into a GBNF grammar sampler) and unconstrained with as many
tokens — decode tok/s from its own timings. The texts differ (each engine's JSON whitespace
and order rules), so the comparison is of speed and of each engine's constrained/free ratio.
Usage: bench/grammar_bench.py [--model GGUF] [--threads N] [--cli build/release/specula]
                              [--llama-server PATH]
"""
import argparse
import concurrent.futures as cf
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import specula_server as ss  # noqa: E402


def metrics(srv):
    _, _, body = srv.request("GET", "/metrics")
    return ss.parse_metrics(body.decode())


def post(srv, body):
    status, _, data = srv.request("POST", "/v1/chat/completions", body, timeout=600)
    if status != 200:
        raise SystemExit(f"status {status}: {data[:300]}")
    return json.loads(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/specula/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--threads", default=str(os.cpu_count() or 2))
    ap.add_argument("--cli", default=None)
    ap.add_argument("--llama-server", default=None)
    a = ap.parse_args()
    if a.cli:
        os.environ["SPECULA_CLI"] = a.cli
    os.environ["SPECULA_TEST_THREADS"] = a.threads
    with open(os.path.join(HERE, "..", "tests", "fixtures", "structured", "schemas.json")) as f:
        cases = json.load(f)["cases"]
    with ss.Server("--parallel", "8", "--ctx", "8192", "--spec", "ngram", "--spec-max-batch", "0",
                   model=a.model) as srv:
        def msg(c):
            return [{"role": "user", "content": c["prompt"]}]

        def constrained(c, spec):
            return post(srv, {"messages": msg(c), "max_tokens": 200, "temperature": 0, "speculative": spec,
                              "response_format": {"type": "json_schema",
                                                  "json_schema": {"name": c["name"], "schema": c["schema"]}}})
        post(srv, {"messages": msg(cases[0]), "max_tokens": 4})  # warm-up
        tot = {"constrained": [0, 0.0], "free": [0, 0.0], "constrained+spec": [0, 0.0]}
        m0 = metrics(srv)
        for c in cases:
            r = constrained(c, False)
            n = r["usage"]["completion_tokens"]
            tot["constrained"][0] += r["timings"]["predicted_n"]
            tot["constrained"][1] += r["timings"]["predicted_ms"]
            m1 = metrics(srv)
            r = post(srv, {"messages": msg(c), "max_tokens": max(n, 1), "temperature": 0, "ignore_eos": True,
                           "speculative": False})
            tot["free"][0] += r["timings"]["predicted_n"]
            tot["free"][1] += r["timings"]["predicted_ms"]
            r = constrained(c, True)
            tot["constrained+spec"][0] += r["timings"]["predicted_n"]
            tot["constrained+spec"][1] += r["timings"]["predicted_ms"]
        m2 = metrics(srv)

        def d(key, x, y):
            return y.get(key, 0) - x.get(key, 0)
        masks = d("specula_grammar_masks_total", m0, m2)
        mask_s = d("specula_grammar_mask_seconds_total", m0, m2)
        wait_s = d("specula_grammar_wait_seconds_total", m0, m2)
        print(f"model {os.path.basename(a.model)}, {a.threads} threads, {len(cases)} schemas, one stream:")
        for k, (n, ms) in tot.items():
            print(f"  {k:18s} {n:6d} tokens  {1000 * n / ms:7.1f} tok/s")
        print(f"  grammar masks: {int(masks)} computed, {1e6 * mask_s / max(masks, 1):.0f} us per mask on the worker, "
              f"steps waited {1e3 * wait_s:.1f} ms in all ({1e6 * wait_s / max(masks, 1):.0f} us per mask)")

        # 8 streams: 4 constrained + 4 free, twice over the schemas' first 16.
        pool = cf.ThreadPoolExecutor(8)
        m3 = metrics(srv)
        t0 = time.time()
        jobs = []
        for k in range(16):
            c = cases[k]
            if k % 2 == 0:
                jobs.append(pool.submit(lambda c=c: post(srv, {
                    "messages": msg(c), "max_tokens": 64, "temperature": 0, "speculative": False,
                    "response_format": {"type": "json_schema", "json_schema": {"name": c["name"], "schema": c["schema"]}}})))
            else:
                jobs.append(pool.submit(lambda c=c: post(srv, {"messages": msg(c), "max_tokens": 64, "temperature": 0,
                                                               "ignore_eos": True, "speculative": False})))
        n = sum(j.result()["usage"]["completion_tokens"] for j in jobs)
        dt = time.time() - t0
        m4 = metrics(srv)
        masks = d("specula_grammar_masks_total", m3, m4)
        print(f"8 streams (half constrained): {n} tokens in {dt:.1f} s = {n / dt:.1f} tok/s; "
              f"{1e6 * d('specula_grammar_mask_seconds_total', m3, m4) / max(masks, 1):.0f} us per mask, "
              f"steps waited {1e3 * d('specula_grammar_wait_seconds_total', m3, m4):.1f} ms in all")
    if a.llama_server:
        llama_server_loop(a, cases)


def llama_server_loop(a, cases):
    import http.client
    import socket
    import subprocess
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([a.llama_server, "-m", a.model, "--port", str(port), "-np", "1", "-c", "8192", "-t",
                             a.threads, "-tb", a.threads, "--no-webui", "--jinja"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.3)

        def post(body):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                raise SystemExit(f"llama-server {r.status}: {data[:300]}")
            return json.loads(data)
        post({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        tot = {"constrained": [0, 0.0], "free": [0, 0.0]}
        for c in cases:
            msgs = [{"role": "user", "content": c["prompt"]}]
            r = post({"messages": msgs, "max_tokens": 200, "temperature": 0,
                      "response_format": {"type": "json_schema",
                                          "json_schema": {"name": c["name"], "schema": c["schema"]}}})
            n = r["timings"]["predicted_n"]
            tot["constrained"][0] += n
            tot["constrained"][1] += r["timings"]["predicted_ms"]
            r = post({"messages": msgs, "max_tokens": max(n, 1), "temperature": 0, "ignore_eos": True})
            tot["free"][0] += r["timings"]["predicted_n"]
            tot["free"][1] += r["timings"]["predicted_ms"]
        print(f"llama-server ({a.llama_server}), same model, {a.threads} threads, one stream:")
        for k, (n, ms) in tot.items():
            print(f"  {k:18s} {n:6d} tokens  {1000 * n / ms:7.1f} tok/s")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
