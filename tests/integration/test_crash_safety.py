"""tests/integration/test_crash_safety.py — `specula serve` killed with SIGKILL at random moments
under load, again and again, on one prompt-cache folder (`--cache-dir` with a small
`--cache-disk` cap and `--generation-checkpoint 4`, so entries and checkpoints are written all
the time and some writes are cut):
  - every restart comes up (no start failure, whatever a kill left in the folder);
  - every answer equals the uncached server's (the oracle: the same requests on a server
    without a prompt cache) — no cache entry or checkpoint is ever corrupt or served wrongly;
  - the requests in flight at each kill are sent again after the restart (a generation
    checkpoint lets them resume) and equal the oracle too;
  - the folder never exceeds its cap after a restart (interrupted writes are cleaned up);
    right after a kill it may hold at most the writes the kill cut short, and the next start
    removes those (this host's temporary files whose writer is gone).
Kills: SPECULA_CRASH_KILLS (default 8; the bench run in docs/BENCHMARKS.md used 50).
Exit 0 pass, 1 fail, 77 skip (no model).
"""

import concurrent.futures as cf
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

KILLS = int(os.environ.get("SPECULA_CRASH_KILLS", "8"))
SEED = int(os.environ.get("SPECULA_CRASH_SEED", "4242"))
CAP_MIB = 24
CITIES = ["Paris", "Lisbon", "Oslo", "Cairo", "Lima", "Quito", "Hanoi", "Dakar", "Perth", "Riga"]
STORY = ("Once upon a time, in a small town by the sea, there lived an old clockmaker who repaired every "
         "clock in the valley. One winter morning a traveller arrived from ")


def body(i):
    # Shared prefixes (the cache serves them); seeded sampling on odd ones.
    b = {"prompt": STORY + CITIES[i % len(CITIES)] + ". " * (i // len(CITIES)), "max_tokens": 24 + 4 * (i % 4),
         "temperature": 0.8 if i % 2 else 0.0, "seed": 1000 + i, "ignore_eos": True}
    return b


def post(url, b, timeout=120):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(b).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def temporaries(d):
    return [f for _, _, files in os.walk(d) for f in files if ".tmp." in f]


def folder_bytes(d):
    total = 0
    for root, _, files in os.walk(d):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def main():
    ss.require_model()
    rng = random.Random(SEED)
    n_bodies = 20
    with ss.Server("--cache-ram", "0", "--parallel", "4") as srv:  # the oracle: no prompt cache
        oracle = [post(srv.url, body(i))["choices"][0]["text"] for i in range(n_bodies)]
    d = tempfile.mkdtemp(prefix="specula_crash_")
    args = ("--cache-dir", d, "--cache-disk", str(CAP_MIB), "--cache-ram", "4", "--generation-checkpoint", "4",
            "--parallel", "4")
    answers = wrong = resent = resumed = starts = cut_writes = 0
    max_after_kill = max_after_start = 0
    in_flight = []
    try:
        for k in range(KILLS + 1):
            srv = ss.Server(*args)
            srv.start()
            starts += 1
            max_after_start = max(max_after_start, folder_bytes(d))
            check(not temporaries(d), f"restart {k}: interrupted writes left behind: {temporaries(d)[:3]}")
            check(folder_bytes(d) <= CAP_MIB << 20,
                  f"restart {k}: the folder holds {folder_bytes(d) / 2**20:.1f} MiB, over its {CAP_MIB} MiB cap")
            # What the last kill cut short is sent first (a generation checkpoint may resume it).
            for i in in_flight:
                out = post(srv.url, body(i))
                text = out["choices"][0]["text"]
                resent += 1
                # A generation resumed from its checkpoint has its whole prompt from the cache
                # (a prompt alone leaves its last token to prefill).
                u = out["usage"]
                resumed += u["prompt_tokens_details"]["cached_tokens"] == u["prompt_tokens"]
                answers += 1
                if text != oracle[i]:
                    wrong += 1
                    raise ss.TestFailure(f"restart {k}: re-sent request {i} gave {text!r}, want {oracle[i]!r}")
            in_flight = []
            if k == KILLS:
                srv.stop()  # the last run ends cleanly
                break
            stop = threading.Event()
            lock = threading.Lock()
            flying = set()

            def client(c):
                nonlocal answers, wrong
                r = random.Random(SEED * 100 + k * 10 + c)
                while not stop.is_set():
                    i = r.randrange(n_bodies)
                    with lock:
                        flying.add((c, i))
                    try:
                        text = post(srv.url, body(i), timeout=60)["choices"][0]["text"]
                    except Exception:  # the kill: this one was in flight
                        return
                    with lock:
                        flying.discard((c, i))
                        answers += 1
                        if text != oracle[i]:
                            wrong += 1
                            raise ss.TestFailure(f"run {k}: request {i} gave {text!r}, want {oracle[i]!r}")

            with cf.ThreadPoolExecutor(4) as pool:
                futures = [pool.submit(client, c) for c in range(4)]
                time.sleep(rng.uniform(0.3, 3.0))
                srv.proc.send_signal(signal.SIGKILL)
                srv.proc.wait(30)
                stop.set()
                for f in futures:
                    f.result()
            in_flight = sorted({i for _, i in flying})
            max_after_kill = max(max_after_kill, folder_bytes(d))
            cut_writes += len(temporaries(d))
        check(wrong == 0, f"{wrong} wrong answers")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return (f"{KILLS} SIGKILLs (seed {SEED}): {starts} starts, 0 start failures, {answers} answers all equal to the "
            f"uncached server's ({resent} re-sent after a kill, {resumed} of them resumed from a generation "
            f"checkpoint); {cut_writes} writes cut by a kill, all cleaned up at the "
            f"next start; folder at most {max_after_start / 2**20:.1f} MiB after "
            f"a start, {max_after_kill / 2**20:.1f} MiB right after a kill (cap {CAP_MIB} MiB)")


if __name__ == "__main__":
    ss.run_main("crash_safety", main)
