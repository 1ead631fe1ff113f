#!/usr/bin/env python3
"""bench/prompt_cache_bench.py — the prompt cache, specula vs llama-server, same machine.

ttft    A --prompt-tokens (default 2000) prompt, answered with --n-gen tokens, then a new
        turn (prompt + answer + ~40 new tokens): time to first token of the new turn, cold
        (a fresh server, no cache), warm (the same server: the first turn's state is
        cached) and after a restart (specula: --cache-dir, flushed after the first turn, a
        new process; llama-server: its slot saved with /slots?action=save after the first
        turn and restored after the start), each answering another new turn on the same
        history. Both engines, same model, threads and prompts.
chat    A 10-turn chat replayed through /v1/chat/completions (each turn resends the
        conversation): total prefill tokens (prompt - cached) and wall time, with and
        without specula's prompt cache, and llama-server's own prefix reuse beside them.
memory  32 clients send distinct prompts for --seconds; the RAM tier's cap (--cache-ram)
        must hold: RSS is sampled every second and reported against the idle RSS.

Usage: bench/prompt_cache_bench.py ttft|chat|memory [--model FILE] [--threads N] ...
llama-server comes from tools/build_llama_server.sh.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from serve_bench import free_port, sse_events, wait_ready  # noqa: E402

MODELS = os.environ.get("SPECULA_MODELS", os.path.expanduser("~/.cache/specula/models"))


def llama_bin(name: str) -> str:
    d = subprocess.check_output([str(ROOT / "tools" / "build_llama_server.sh"), "--print-bin-dir"], text=True).strip()
    return os.path.join(d, name)


def start(engine: str, args, port: int, extra: list[str], parallel: int = 1, ctx: int = 8192) -> subprocess.Popen:
    if engine == "specula":
        cmd = [args.specula, "serve", "-m", args.model, "--port", str(port), "--parallel", str(parallel), "--ctx", str(ctx),
               "--threads", str(args.threads), "--alias", "bench", *extra]
    else:
        # --no-repack: this llama.cpp's AMX matmul crashes on CPUs that have AMX otherwise.
        cmd = [llama_bin("llama-server"), "-m", args.model, "--port", str(port), "-np", str(parallel), "-c", str(ctx),
               "-t", str(args.threads), "-tb", str(args.threads), "--alias", "bench", "--no-webui", "--no-repack",
               *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, proc)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def post(port: int, path: str, body: dict, timeout: float = 900) -> dict:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:300]!r}")
    return json.loads(data) if data else {}


def ttft(port: int, prompt: list[int], n_gen: int) -> tuple[float, list[int], float]:
    """Streams a completion; returns (seconds to the first token, generated ids, total seconds)."""
    body = {"prompt": prompt, "max_tokens": n_gen, "temperature": 0, "stream": True, "return_tokens": True,
            "n_probs": 0, "ignore_eos": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    t0 = time.time()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    text = ""
    for j in sse_events(r):
        t = j["choices"][0].get("text", "") if j.get("choices") else ""
        if t and first is None:
            first = time.time() - t0
        text += t
    return first if first is not None else time.time() - t0, text, time.time() - t0


def tokenize(port: int, text: str) -> list[int]:
    try:
        return post(port, "/tokenize", {"content": text})["tokens"]
    except Exception:  # noqa: BLE001 - specula has no /tokenize: its CLI does it
        return json.loads(subprocess.check_output(["build/release/specula", "tokenize", "-m", ARGS.model, "--json",
                                                   "--no-bos", text], cwd=ROOT, text=True))


def run_ttft(args) -> None:
    rng = random.Random(3)
    prompt = [rng.randrange(1000, 30000) for _ in range(args.prompt_tokens)]
    rows = []
    for engine in ("specula", "llama.cpp"):
        tmp = tempfile.mkdtemp(prefix="pcb_")
        try:
            extra = ["--cache-dir", os.path.join(tmp, "c")] if engine == "specula" else \
                    ["--slot-save-path", tmp, "--cache-ram", "8192"]
            port = free_port()
            proc = start(engine, args, port, extra)
            cold1, answer, _ = ttft(port, prompt, args.n_gen)
            # What survives a restart is the first turn's state (prompt + answer), for both.
            if engine == "specula":
                post(port, "/admin/cache/flush", {})
            else:
                post(port, "/slots/0?action=save", {"filename": "slot0.bin"})
            history = prompt + tokenize(port, answer)
            turn2 = history + [rng.randrange(1000, 30000) for _ in range(40)]
            turn2b = history + [rng.randrange(1000, 30000) for _ in range(40)]  # another new turn
            warm, _, _ = ttft(port, turn2, args.n_gen)
            stop(proc)
            port = free_port()
            proc = start(engine, args, port, extra)
            if engine != "specula":
                post(port, "/slots/0?action=restore", {"filename": "slot0.bin"})
            restart, _, _ = ttft(port, turn2b, args.n_gen)
            stop(proc)
            port = free_port()
            proc = start(engine, args, port, ["--cache-ram", "0"])
            cold2, _, _ = ttft(port, turn2, args.n_gen)
            stop(proc)
            rows.append((engine, cold1, cold2, warm, restart))
            print(f"{engine}: first turn {cold1:.2f} s; new turn cold {cold2:.2f} s, warm {warm:.3f} s, "
                  f"after restart {restart:.3f} s", file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{Path(args.model).name}, {args.prompt_tokens}-token prompt + {args.n_gen}-token answer, then a new turn "
          f"(+{args.n_gen} answer tokens resent, +40 new); {args.threads} threads")
    print("| engine | new turn TTFT cold | warm | warm speed-up | after restart | restart speed-up |")
    print("|---|---|---|---|---|---|")
    for engine, cold1, cold2, warm, restart in rows:
        print(f"| {engine} | {cold2:.2f} s | {warm:.3f} s | {cold2 / warm:.1f}x | {restart:.3f} s | {cold2 / restart:.1f}x |")


def run_chat(args) -> None:
    rng = random.Random(4)
    vocab = ["river", "stone", "light", "market", "garden", "engine", "window", "paper", "music", "winter", "coffee",
             "harbor", "forest", "signal", "bridge", "letter", "orange", "planet", "silver", "thread"]
    turns = [" ".join(rng.choice(vocab) for _ in range(60)) + ". Summarise this in one sentence." for _ in range(10)]
    rows = []
    for engine, label, extra in (("specula", "specula, prompt cache", []),
                                 ("specula", "specula, --cache-ram 0", ["--cache-ram", "0"]),
                                 ("llama.cpp", "llama-server (slot prefix reuse)", [])):
        port = free_port()
        proc = start(engine, args, port, extra)
        msgs = [{"role": "system", "content": "You are a concise assistant."}]
        prefill = cached = prompt_total = 0
        t0 = time.time()
        for t in turns:
            msgs.append({"role": "user", "content": t})
            j = post(port, "/v1/chat/completions", {"messages": msgs, "max_tokens": args.n_gen, "temperature": 0})
            msgs.append({"role": "assistant", "content": j["choices"][0]["message"]["content"]})
            u = j["usage"]
            prompt_total += u["prompt_tokens"]
            details = u.get("prompt_tokens_details") or {}
            cached += details["cached_tokens"] if "cached_tokens" in details else j.get("timings", {}).get("cache_n", 0)
        wall = time.time() - t0
        stop(proc)
        rows.append((label, prompt_total, prompt_total - cached, cached, wall))
    print(f"{Path(args.model).name}: a 10-turn chat (60-word user turns, {args.n_gen}-token answers), each turn "
          f"resending the conversation; {args.threads} threads")
    print("| server | prompt tokens sent | prefilled | served from cache | wall time |")
    print("|---|---|---|---|---|")
    for label, total, pre, cached, wall in rows:
        print(f"| {label} | {total} | {pre} | {cached} | {wall:.1f} s |")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run_memory(args) -> None:
    port = free_port()
    proc = start("specula", args, port, ["--cache-ram", str(args.cache_ram), "--queue", "64"], parallel=8, ctx=16384)
    idle = rss_mb(proc.pid)
    stop_at = time.time() + args.seconds
    counter = [0]
    lock = threading.Lock()

    def client(i: int) -> None:
        r = random.Random(100 + i)
        while time.time() < stop_at:
            prompt = [2] + [r.randrange(1000, 30000) for _ in range(r.randrange(200, 1200))]
            try:
                post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 8, "temperature": 0}, timeout=600)
                with lock:
                    counter[0] += 1
            except Exception:  # noqa: BLE001 - a refused request is fine here
                time.sleep(0.2)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    samples = []
    while time.time() < stop_at:
        samples.append(rss_mb(proc.pid))
        time.sleep(1)
    for t in threads:
        t.join()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    metrics = c.getresponse().read().decode()
    stop(proc)
    def metric(name: str) -> float:
        for ln in metrics.splitlines():
            if ln.startswith(name + " "):
                return float(ln.split()[-1])
        return float("nan")

    model_mb = os.path.getsize(args.model) / 2**20
    kv_mb = metric("specula_kv_budget_bytes") / 2**20
    ram_b = metric('specula_prompt_cache_bytes{tier="ram"}') / 2**20
    ram_n = metric('specula_prompt_cache_entries{tier="ram"}')
    evict = metric('specula_prompt_cache_evictions_total{tier="ram"}')
    # The margin: step activations and scratch, per-connection buffers, allocator slack.
    bound = idle + model_mb + kv_mb + args.cache_ram + args.margin
    print(f"{Path(args.model).name}: 32 clients, distinct 200-1200-token prompts, {args.seconds} s, "
          f"--cache-ram {args.cache_ram} MiB, {args.threads} threads: {counter[0]} requests answered")
    print(f"RSS idle {idle:.0f} MiB, peak {max(samples):.0f} MiB, last {samples[-1]:.0f} MiB; bound = idle + model file "
          f"{model_mb:.0f} + KV budget {kv_mb:.0f} + cache cap {args.cache_ram} + margin {args.margin} = {bound:.0f} MiB "
          f"({'within' if max(samples) <= bound else 'OVER'}); prompt cache at the end: "
          f"{ram_b:.0f} MiB in {ram_n:.0f} entries, {evict:.0f} evictions")
    print("RSS each minute (MiB): " + ", ".join(f"{samples[i]:.0f}" for i in range(0, len(samples), 60)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["ttft", "chat", "memory"])
    ap.add_argument("--model", default=os.path.join(MODELS, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--n-gen", type=int, default=16)
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--cache-ram", type=int, default=256)
    ap.add_argument("--margin", type=int, default=64, help="MiB allowed above idle + model + KV budget + cache cap")
    ap.add_argument("--specula", default=str(ROOT / "build" / "release" / "specula"))
    args = ap.parse_args()
    global ARGS
    ARGS = args
    {"ttft": run_ttft, "chat": run_chat, "memory": run_memory}[args.mode](args)
    return 0


ARGS = None

if __name__ == "__main__":
    sys.exit(main())
