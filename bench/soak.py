#!/usr/bin/env python3
"""bench/soak.py — a long soak of `specula serve`: many clients for many minutes, a third
of them walking away mid-request, speculation on for half; every completed answer is
compared with the same request run alone, and the server's memory is watched.

The server runs with `--spec ngram --spec-max-batch 0` (drafts in every step, whatever the
batch; requests opt out with `"speculative": false`).
A catalogue of requests (completions and chat; greedy and seeded sampling; streamed or
not) is first run one at a time, without speculation: the solo reference texts. Then
--clients threads loop until --minutes are over:
  - clients k % 3 == 0 cancel: a stream closed after a random number of events, or a
    non-streamed request whose socket is closed after a random delay;
  - the others finish their request and compare its text with the solo text
    (a mismatch is a divergence);
  - even k ask for speculation, odd k opt out.
Every 15 s /metrics is sampled (RSS, rows, queue, connections, cancelled count).
Pass: 0 errors (any non-200, broken stream or exception in a finishing client), 0
divergences, no row still held at the end, and RSS less the RAM prompt cache (which grows
by design up to --cache-ram, with every finished or cancelled request's state) after the
run within --rss-slack MiB of its value after warm-up (the first --warmup fraction of the
run). Exit 0 pass, 1 fail.

Usage: bench/soak.py [--model FILE] [--minutes 30] [--clients 64] [--parallel 8]
                     [--threads N] [--json OUT]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import PROMPTS, free_port, sse_events, wait_ready  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LOOKUP_PROMPTS = [  # text that repeats: n-gram drafts get accepted
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "red green blue red green blue red green blue",
    "The cat sat on the mat. The cat sat on the mat. The cat",
]


def catalogue():
    out = []
    prompts = PROMPTS + LOOKUP_PROMPTS
    for i, p in enumerate(prompts):
        sampled = i % 2 == 1
        body = {"max_tokens": 16 + (i * 7) % 33, "ignore_eos": True}
        body.update({"temperature": 0.8, "seed": 1000 + i} if sampled else {"temperature": 0})
        if i % 4 == 3:
            out.append(("/v1/chat/completions", dict(body, messages=[{"role": "user", "content": p}])))
        else:
            out.append(("/v1/completions", dict(body, prompt=p)))
    return out


def text_of(route, obj):
    ch = obj.get("choices") or []
    if not ch:
        return ""
    if route.endswith("chat/completions"):
        m = ch[0].get("message") or ch[0].get("delta") or {}
        return m.get("content") or ""
    return ch[0].get("text") or ""


def run_request(port, route, body, stream):
    """The request's text; raises on any failure."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        b = dict(body, stream=stream)
        c.request("POST", route, json.dumps(b), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
        if not stream:
            return text_of(route, json.loads(r.read()))
        text = ""
        finish = None
        for obj in sse_events(r):
            if "error" in obj:
                raise RuntimeError(f"error event {obj}")
            text += text_of(route, obj)
            if obj.get("choices") and obj["choices"][0].get("finish_reason"):
                finish = obj["choices"][0]["finish_reason"]
        if finish is None:
            raise RuntimeError("stream ended without a finish reason")
        return text
    finally:
        c.close()


def cancel_request(port, route, body, rng):
    """Starts a request and walks away from it."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        stream = rng.random() < 0.6
        data = json.dumps(dict(body, stream=stream)).encode()
        s.sendall(f"POST {route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        if stream:
            want = rng.randint(1, 200)  # bytes of the stream to read before leaving
            got = 0
            while got < want:
                d = s.recv(min(4096, want - got))
                if not d:
                    break
                got += len(d)
        else:
            time.sleep(rng.uniform(0.0, 1.5))
    finally:
        s.close()


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    r = c.getresponse()
    out = {}
    for line in r.read().decode().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    c.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(Path(os.environ.get("SPECULA_MODELS", Path.home() / ".cache/specula/models"))
                                           / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--specula", default=str(ROOT / "build/release/specula"))
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--warmup", type=float, default=0.15, help="fraction of the run before the RSS baseline")
    ap.add_argument("--rss-slack", type=float, default=64, help="MiB of RSS growth allowed after warm-up")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args()

    port = free_port()
    cmd = [args.specula, "serve", "-m", args.model, "--port", str(port), "--parallel", str(args.parallel),
           "--threads", str(args.threads), "--spec", "ngram", "--spec-max-batch", "0", "--alias", "soak", "--queue", str(4 * args.clients),
           "--chat-template-file", str(ROOT / "tests/fixtures/chat_templates/gemma3.jinja")]
    log = open(os.environ.get("SOAK_SERVER_LOG", os.devnull), "w")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_ready(port, proc)
        cat = catalogue()
        t0 = time.time()
        solo = [run_request(port, route, dict(body, speculative=False), False) for route, body in cat]
        t_solo = time.time() - t0
        print(f"[soak] {len(cat)} solo references in {t_solo:.1f} s; {args.clients} clients for {args.minutes} min",
              flush=True)

        lock = threading.Lock()
        st = {"done": 0, "cancelled": 0, "errors": 0, "divergent": 0, "samples": [], "chars": 0}
        deadline = time.time() + args.minutes * 60

        def client(k):
            rng = random.Random(args.seed * 1000 + k)
            canceller = k % 3 == 0
            spec = k % 2 == 0
            while time.time() < deadline:
                i = rng.randrange(len(cat))
                route, body = cat[i]
                body = dict(body, speculative=spec)
                try:
                    if canceller:
                        cancel_request(port, route, body, rng)
                        with lock:
                            st["cancelled"] += 1
                        continue
                    text = run_request(port, route, body, rng.random() < 0.5)
                    with lock:
                        st["done"] += 1
                        st["chars"] += len(text)
                        if text != solo[i]:
                            st["divergent"] += 1
                            if len(st["samples"]) < 5:
                                st["samples"].append(f"divergence on #{i} spec={spec}: {text!r} vs {solo[i]!r}")
                except Exception as e:  # noqa: BLE001
                    with lock:
                        st["errors"] += 1
                        if len(st["samples"]) < 5:
                            st["samples"].append(f"client {k} request #{i}: {e!r}")

        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(args.clients)]
        for t in threads:
            t.start()
        series = []
        t_start = time.time()
        while any(t.is_alive() for t in threads):
            time.sleep(15 if time.time() < deadline else 1)
            m = metrics(port)
            cache = m.get('specula_prompt_cache_bytes{tier="ram"}', 0)
            series.append({"t": round(time.time() - t_start, 1),
                           "rss_mib": round(m.get("process_resident_memory_bytes", 0) / 2 ** 20, 1),
                           "cache_mib": round(cache / 2 ** 20, 1),
                           "rss_minus_cache_mib": round((m.get("process_resident_memory_bytes", 0) - cache) / 2 ** 20, 1),
                           "rows": m.get("specula_running_rows", 0), "queue": m.get("specula_queue_depth", 0),
                           "conns": m.get("specula_http_connections_open", 0)})
            with lock:
                print(f"[soak] t={series[-1]['t']:7.1f}s rss={series[-1]['rss_mib']} MiB "
                      f"(prompt cache {series[-1]['cache_mib']} MiB) rows={series[-1]['rows']:.0f} "
                      f"queue={series[-1]['queue']:.0f} done={st['done']} cancelled={st['cancelled']} "
                      f"errors={st['errors']} divergent={st['divergent']}", flush=True)
        for t in threads:
            t.join()
        # The server is idle again: every row freed, nothing queued.
        time.sleep(2)
        m = metrics(port)
        warm = [s for s in series if s["t"] >= args.warmup * args.minutes * 60] or series
        rss_warm = warm[0]["rss_mib"]
        rss_end = m.get("process_resident_memory_bytes", 0) / 2 ** 20
        rss_max = max(s["rss_mib"] for s in warm)
        # The RAM prompt cache grows by design (up to --cache-ram): what must stay flat is
        # the rest of the process.
        cache_end = m.get('specula_prompt_cache_bytes{tier="ram"}', 0) / 2 ** 20
        other_warm = warm[0]["rss_minus_cache_mib"]
        other_end = rss_end - cache_end
        summary = {
            "minutes": args.minutes, "clients": args.clients, "parallel": args.parallel, "threads": args.threads,
            "model": os.path.basename(args.model), "completed": st["done"], "walked_away": st["cancelled"],
            "errors": st["errors"], "divergent": st["divergent"], "samples": st["samples"],
            "server_cancelled": m.get('specula_requests_total{outcome="cancelled"}', 0),
            "server_finished": m.get('specula_requests_total{outcome="stop"}', 0)
            + m.get('specula_requests_total{outcome="length"}', 0),
            "generated_tokens": m.get("specula_generated_tokens_total", 0),
            "spec_acceptance": round(m.get("specula_spec_acceptance_rate", 0), 3),
            "http_5xx": sum(v for k, v in m.items() if k.startswith("specula_http_responses_total") and '"5' in k),
            "running_rows_after": m.get("specula_running_rows", 0), "queue_after": m.get("specula_queue_depth", 0),
            "rss_after_warmup_mib": rss_warm, "rss_max_after_warmup_mib": rss_max, "rss_end_mib": round(rss_end, 1),
            "prompt_cache_after_warmup_mib": warm[0]["cache_mib"], "prompt_cache_end_mib": round(cache_end, 1),
            "rss_minus_cache_after_warmup_mib": other_warm, "rss_minus_cache_end_mib": round(other_end, 1),
            "series": series,
        }
        ok = (st["errors"] == 0 and st["divergent"] == 0 and summary["http_5xx"] == 0
              and other_end - other_warm <= args.rss_slack and summary["running_rows_after"] == 0)
        summary["pass"] = ok
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=1))
        print(json.dumps({k: v for k, v in summary.items() if k != "series"}, indent=1))
        return 0 if ok else 1
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
