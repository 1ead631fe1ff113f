#!/usr/bin/env python3
"""bench/spec_bench.py — speculative decoding: specula vs llama.cpp, same pair, same run.

Both engines run as servers on the same target (default Qwen2.5-Coder 1.5B Q4_K_M), each
configuration started fresh: plain decoding, n-gram drafts (specula `--spec ngram`,
llama-server `--spec-type ngram-simple`), and the draft model (default Qwen2.5-Coder 0.5B;
specula `--draft-model`, llama-server `-md ... --spec-type draft-simple`), draft depth
--depth for both. C clients (1 and 4) send /v1/completions at once (greedy, ChatML
prompt text, max_tokens --n-gen) for two tasks:
  code — repeat a given Python file with two small edits (the case speculation is for);
  text — free prose.
Reported: decode tokens/s (tokens after the first / decode time, from each server's
`timings`, so prompt prefill is excluded; C > 1: all clients' tokens / the longest decode
time), the speed-up over the
same engine's plain decoding, and specula's acceptance (usage.speculative). Outputs of
specula with and without speculation are compared (they must be equal: greedy).

Mode eagle3 (--modes ...,eagle3 --head HEAD.gguf): an EAGLE-3 head (specula `--spec eagle3
--draft-model HEAD`, llama-server `-md HEAD --spec-type draft-eagle3` with a fixed chain of
--depth drafts: `--spec-draft-n-min 0 --spec-draft-p-min 0`).

Usage: bench/spec_bench.py [--target FILE] [--draft FILE] [--head FILE] [--clients 1,4]
                           [--n-gen 192] [--depth 4] [--tasks code,text]
                           [--modes plain,ngram,draft,eagle3] [--engines specula,llama]
                           [--spec-max-batch N]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import ROOT, free_port, wait_ready  # noqa: E402

CODE = '''import json
import os
import socket


DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def load_config(path):
    """Reads the JSON config file at path, or returns the defaults."""
    if not os.path.exists(path):
        return {"host": DEFAULT_HOST, "port": DEFAULT_PORT, "workers": 4}
    with open(path) as f:
        config = json.load(f)
    config.setdefault("host", DEFAULT_HOST)
    config.setdefault("port", DEFAULT_PORT)
    config.setdefault("workers", 4)
    return config


def open_socket(config):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config["host"], config["port"]))
    sock.listen(config["workers"] * 16)
    return sock


def serve_forever(sock, handler):
    while True:
        conn, addr = sock.accept()
        try:
            data = conn.recv(65536)
            conn.sendall(handler(data, addr))
        finally:
            conn.close()


def main():
    config = load_config(os.environ.get("APP_CONFIG", "config.json"))
    sock = open_socket(config)
    serve_forever(sock, lambda data, addr: data.upper())


if __name__ == "__main__":
    main()
'''

EDITS = [
    "rename the function load_config to read_config everywhere, and change DEFAULT_PORT to 9090",
    "rename the function open_socket to make_listener everywhere, and change the default workers from 4 to 8",
    "rename the function serve_forever to run_loop everywhere, and change DEFAULT_HOST to \"0.0.0.0\"",
    "rename the variable sock to listener everywhere, and make the listen backlog workers * 32",
]
TEXT = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain to a ten-year-old how vaccines train the immune system.",
    "Describe a walk through a busy market in Marrakech in the early morning.",
    "Write a letter from a retired astronaut to her granddaughter about the first time she saw Earth from orbit.",
]


def chatml(user: str) -> str:
    return f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def prompt_for(task: str, i: int) -> str:
    if task == "code":
        return chatml(f"Repeat this Python file exactly, but {EDITS[i % len(EDITS)]}. Output only the full file.\n\n```python\n{CODE}```")
    return chatml(TEXT[i % len(TEXT)])


def start(engine: str, mode: str, args, C: int):
    port = free_port()
    if engine == "specula":
        cmd = [args.specula, "serve", "-m", args.target, "--port", str(port), "--parallel", str(C), "--ctx", str(2048 * C),
               "--threads", str(args.threads), "--alias", "bench"]
        if mode == "ngram":
            cmd += ["--spec", "ngram", "--spec-depth", str(args.depth)]
        elif mode == "draft":
            cmd += ["--draft-model", args.draft, "--spec-depth", str(args.depth)]
        elif mode == "eagle3":
            cmd += ["--spec", "eagle3", "--draft-model", args.head, "--spec-depth", str(args.depth)]
        if args.spec_max_batch is not None:
            cmd += ["--spec-max-batch", str(args.spec_max_batch)]
    else:
        cmd = [args.llama_server, "-m", args.target, "--port", str(port), "-np", str(C), "-c", str(2048 * C),
               "-t", str(args.threads), "-tb", str(args.threads), "--alias", "bench", "--no-webui", "-cb"]
        if mode == "ngram":
            cmd += ["--spec-type", "ngram-simple", "--spec-draft-n-max", str(args.depth)]
        elif mode == "draft":
            cmd += ["-md", args.draft, "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.depth),
                    "-td", str(args.threads), "-tbd", str(args.threads)]
        elif mode == "eagle3":  # a fixed chain of --depth drafts, as specula's
            cmd += ["-md", args.head, "--spec-type", "draft-eagle3", "--spec-draft-n-max", str(args.depth),
                    "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-td", str(args.threads), "-tbd", str(args.threads)]
    log = open(f"/tmp/spec_bench_{engine}_{mode}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    wait_ready(port, proc, timeout=300)
    return proc, port


def one(port: int, prompt: str, n_gen: int, out: dict) -> None:
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": n_gen, "temperature": 0, "top_k": 1})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
    obj = json.loads(data)
    out["text"] = obj["choices"][0]["text"]
    out["usage"] = obj.get("usage", {})
    out["timings"] = obj.get("timings", {})


def run(port: int, task: str, C: int, n_gen: int) -> dict:
    outs = [dict() for _ in range(C)]
    ts = [threading.Thread(target=one, args=(port, prompt_for(task, i), n_gen, outs[i])) for i in range(C)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if any("text" not in o for o in outs):
        raise RuntimeError("a request failed")
    tokens = sum(o["usage"].get("completion_tokens", 0) for o in outs)
    drafted = sum(o["usage"].get("speculative", {}).get("draft_tokens", 0) for o in outs)
    accepted = sum(o["usage"].get("speculative", {}).get("accepted_tokens", 0) for o in outs)
    l_drafted = sum(o["timings"].get("draft_n", 0) for o in outs)
    l_accepted = sum(o["timings"].get("draft_n_accepted", 0) for o in outs)
    # Decode speed: tokens after the first / decode time, from each server's "timings"
    # (llama-server's field names; specula reports the same); C > 1: summed over clients
    # divided by the longest decode time.
    dec_tokens = sum(max(o["timings"].get("predicted_n", 0) - 1, 0) for o in outs)
    dec_time = max(o["timings"].get("predicted_ms", 0) for o in outs) / 1e3
    return {"tokens": tokens, "wall": wall, "tps": dec_tokens / dec_time if dec_time > 0 else tokens / wall,
            "wall_tps": tokens / wall, "texts": [o["text"] for o in outs],
            "drafted": drafted or l_drafted, "accepted": accepted or l_accepted}


def main() -> int:
    models = Path(os.environ.get("SPECULA_MODELS", Path.home() / ".cache/specula/models"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=str(models / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--draft", default=str(models / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--head", default=None, help="an EAGLE-3 head for the target (mode eagle3; tools/train_eagle3.py)")
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--n-gen", type=int, default=192)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--tasks", default="code,text")
    ap.add_argument("--modes", default="plain,ngram,draft")
    ap.add_argument("--engines", default="specula,llama")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--spec-max-batch", type=int, default=None,
                    help="specula serve --spec-max-batch (default: the server's default, 2; 0 = always speculate)")
    ap.add_argument("--specula", default=str(ROOT / "build/release/specula"))
    ap.add_argument("--llama-server", default=None)
    args = ap.parse_args()
    if args.llama_server is None:
        bindir = subprocess.run([str(ROOT / "tools/build_llama_server.sh"), "--print-bin-dir"], capture_output=True,
                                text=True).stdout.strip()
        args.llama_server = str(Path(bindir) / "llama-server")
    results = {}
    for C in [int(x) for x in args.clients.split(",")]:
        for engine in args.engines.split(","):
            for mode in args.modes.split(","):
                proc, port = start(engine, mode, args, C)
                try:
                    try:
                        run(port, "text", 1, 8)  # warm-up
                    except (RuntimeError, OSError) as e:  # the server died (llama-server aborts on some pairs)
                        print(f"[spec_bench] {engine} {mode} C={C}: FAILED ({e}; server exit code {proc.poll()})",
                              file=sys.stderr, flush=True)
                        continue
                    for task in args.tasks.split(","):
                        r = run(port, task, C, args.n_gen)
                        results[(engine, mode, task, C)] = r
                        acc = f", accepted {r['accepted']}/{r['drafted']}" if r["drafted"] else ""
                        print(f"[spec_bench] {engine} {mode} {task} C={C}: {r['tps']:.2f} decode tok/s, "
                              f"{r['wall_tps']:.2f} tok/s wall "
                              f"({r['tokens']} tokens, {r['wall']:.1f} s{acc})", file=sys.stderr, flush=True)
                finally:
                    proc.terminate()
                    proc.wait(timeout=60)
    print("| engine | task | clients | plain tok/s | ngram tok/s (x) | draft-model tok/s (x) | eagle3 tok/s (x) | "
          "draft / eagle3 acceptance |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (engine, mode, task, C), r in sorted(results.items()):
        if mode != "plain":
            continue
        row = [engine, task, str(C), f"{r['tps']:.2f}"]
        for m in ("ngram", "draft", "eagle3"):
            s = results.get((engine, m, task, C))
            row.append(f"{s['tps']:.2f} ({s['tps'] / r['tps']:.2f}x)" if s else "-")
        acc = []
        for m in ("draft", "eagle3"):
            d = results.get((engine, m, task, C))
            acc.append(f"{d['accepted']}/{d['drafted']} ({100 * d['accepted'] / d['drafted']:.0f}%)"
                       if d and d["drafted"] else "-")
        row.append(" / ".join(acc))
        print("| " + " | ".join(row) + " |")
    # Lossless check: specula's outputs with speculation equal plain decoding.
    bad = 0
    for (engine, mode, task, C), r in results.items():
        if engine == "specula" and mode != "plain" and ("specula", "plain", task, C) in results:
            if r["texts"] != results[("specula", "plain", task, C)]["texts"]:
                bad += 1
                print(f"MISMATCH specula {mode} {task} C={C} differs from plain", file=sys.stderr)
    for (engine, mode, task, C), r in results.items():
        if engine == "specula" and ("llama", mode, task, C) in results:
            pass
    print(f"\nspecula speculative outputs equal to plain: {'yes' if bad == 0 else f'NO ({bad} mismatches)'}")
    for key in sorted({(t, C) for (_, _, t, C) in results}):
        t, C = key
        s, l = results.get(("specula", "draft", t, C)), results.get(("llama", "draft", t, C))
        if s and l:
            print(f"draft model, {t}, C={C}: specula / llama.cpp = {s['tps'] / l['tps']:.2f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
