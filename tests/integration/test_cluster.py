#!/usr/bin/env python3
"""test_cluster.py — three specula replicas behind sglang-router (scripts/cluster), on loopback.

1. Cache-aware routing vs round-robin, in one run over the same replicas: four groups of
   completions, each group sharing a long prefix, go through a cache_aware router (the
   cluster's) and, with other prefixes, through a round_robin router started beside it.
   The share of prompt tokens the replicas served from their prompt caches
   (usage.prompt_tokens_details.cached_tokens) is measured for each (a benchmark: printed,
   and written into docs/BENCHMARKS.md by hand; the test asserts only that cache-aware is
   ahead). Every answer (greedy) equals the same request sent straight to one replica.
2. A replica killed with SIGKILL under load: every request ends (an answer, or an error
   the client sees; nothing hangs), later requests are answered by the others, and the
   replica, restarted by scripts/cluster, rejoins (the router sends it requests again).
3. A replica sent SIGTERM under load drains: no request admitted anywhere is cut.
Needs the router (scripts/cluster installs it from PyPI; ./scripts/test does so first).
"""
import concurrent.futures as cf
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib.machinery import SourceFileLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specula_server as ss  # noqa: E402
from specula_server import check  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
cluster = SourceFileLoader("cluster", os.path.join(REPO, "scripts", "cluster")).load_module()

TOPICS = ["lighthouse keepers", "glass blowing", "alpine railways", "beekeeping", "tide tables",
          "violin making", "desert astronomy", "paper marbling"]


def prefix(topic):
    # ~250 tokens of text that only this group shares.
    body = " ".join(f"Note {i} about {topic}: the practice has a long history, many regional styles and "
                    f"a vocabulary of its own that apprentices learn over years." for i in range(8))
    return f"Reference material on {topic}.\n{body}\nQuestion: "


def post(url, path, body, timeout=120):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read()[:300]
    except Exception as e:  # noqa: BLE001 - a connection cut by a killed replica
        return 0, repr(e)


def get(url, path, timeout=5):
    try:
        with urllib.request.urlopen(url + path, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except Exception as e:  # noqa: BLE001
        return 0, repr(e).encode()


def requests_for(topics, per_group, model):
    out = []
    for q in range(per_group):
        for t in topics:  # interleaved: groups compete for the replicas
            out.append({"model": model, "prompt": prefix(t) + f"what is point {q} about {t}?", "max_tokens": 8,
                        "temperature": 0})
    return out


def run_batch(url, bodies, workers=3):
    with cf.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda b: post(url, "/v1/completions", b), bodies))


def cache_share(results):
    prompt = cached = 0
    for st, j in results:
        check(st == 200, f"a routed request failed: {st} {j}")
        prompt += j["usage"]["prompt_tokens"]
        cached += j["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return cached / prompt


def served_count(replica_url):
    st, text = get(replica_url, "/metrics")
    if st != 200:
        return -1
    m = ss.parse_metrics(text.decode())
    return sum(v for k, v in m.items() if k.startswith("specula_requests_total{"))


def wait_state(path, cond, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as f:
                st = json.load(f)
            if cond(st):
                return st
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise ss.TestFailure(f"cluster state never reached the expected condition ({path})")


def main():
    ss.require_model()
    py = cluster.install_router("sglang")
    work = os.path.join(REPO, "build", "cluster-test")
    os.makedirs(work, exist_ok=True)
    state = os.path.join(work, "state.json")
    if os.path.exists(state):
        os.remove(state)
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "scripts", "cluster"), "--replicas", "3", "--port", "0",
                             "--policy", "cache_aware", "--state", state, "--log-dir", work, "--specula", ss.cli_path(),
                             "-m", ss.model_path(), "--", "--parallel", "2", "--ctx", "2048", "--log-requests", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rr = None
    stats = []
    try:
        st = wait_state(state, lambda s: True, 300)
        router, replicas = st["router"]["url"], [r["url"] for r in st["replicas"]]
        model = json.loads(get(replicas[0], "/v1/models")[1])["data"][0]["id"]
        # A round-robin router beside the cluster's, in front of the same replicas.
        rr_port = cluster.free_port()
        rr = subprocess.Popen(cluster.router_command("sglang", py, rr_port, replicas, "round_robin", cluster.free_port()),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rr_url = f"http://127.0.0.1:{rr_port}"
        deadline = time.time() + 60
        while not cluster.healthy(rr_url):
            check(time.time() < deadline and rr.poll() is None, "the round-robin router did not start")
            time.sleep(0.3)

        # 1. Cache-aware vs round-robin (different prefixes: one run's cache does not serve the other).
        aware_bodies = requests_for(TOPICS[:4], 6, model)
        rr_bodies = requests_for(TOPICS[4:], 6, model)
        t0 = time.time()
        aware = run_batch(router, aware_bodies)
        t_aware = time.time() - t0
        t0 = time.time()
        robin = run_batch(rr_url, rr_bodies)
        t_rr = time.time() - t0
        share_aware, share_rr = cache_share(aware), cache_share(robin)
        print(f"cached share of prompt tokens: cache_aware {share_aware:.3f} ({t_aware:.1f}s), "
              f"round_robin {share_rr:.3f} ({t_rr:.1f}s), {len(aware_bodies)} requests each", flush=True)
        check(share_aware > share_rr, f"cache-aware routing served no more from cache: {share_aware} vs {share_rr}")
        stats.append(f"cached share cache_aware {share_aware:.2f} vs round_robin {share_rr:.2f}")
        # Every answer equals the same request sent straight to one replica.
        for body, (st_code, j) in zip(aware_bodies + rr_bodies, aware + robin):
            st2, j2 = post(replicas[0], "/v1/completions", body)
            check(st2 == 200 and j2["choices"][0]["text"] == j["choices"][0]["text"],
                  f"routed answer {j['choices'][0]['text']!r} != direct {j2 if st2 != 200 else j2['choices'][0]['text']!r}")
        rr.terminate()
        rr.wait(30)
        rr = None

        # 2. SIGKILL one replica under load.
        victim = st["replicas"][1]
        load = [{"model": model, "prompt": f"Story number {i}:", "max_tokens": 48, "ignore_eos": True} for i in range(12)]
        with cf.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(post, router, "/v1/completions", b, 90) for b in load]
            time.sleep(1.0)
            os.kill(victim["pid"], signal.SIGKILL)
            results = [f.result(timeout=150) for f in futures]  # nothing hangs
        failed = [r for r in results if r[0] != 200]
        for code, body in failed:
            check(code == 0 or code >= 500, f"a request on the killed replica ended with {code} {body}")
        after = run_batch(router, [{"model": model, "prompt": f"After {i}:", "max_tokens": 4} for i in range(6)])
        check(all(code == 200 for code, _ in after), f"requests after the kill failed: {after}")
        st = wait_state(state, lambda s: s["replicas"][1]["restarts"] >= 1, 60)
        deadline = time.time() + 120
        while not cluster.healthy(victim["url"]):
            check(time.time() < deadline, "the killed replica did not come back")
            time.sleep(0.3)
        before = served_count(victim["url"])
        rejoined = False
        words = "river stone cloud lamp orchard harbor violet copper meadow lantern falcon ember".split()
        for i in range(60):
            # Long prompts that share no prefix with anything sent before: the cache-aware
            # policy sends such a request to the replica whose prefix tree is smallest, and
            # each one grows the tree of the replica it went to, so the placement rotates.
            run_batch(router, [{"model": model, "max_tokens": 1,
                                "prompt": " ".join(random.choice(words) for _ in range(250)) + f" {i}"}
                               for _ in range(3)])
            if served_count(victim["url"]) > before:
                rejoined = True
                break
            time.sleep(0.5)
        check(rejoined, "the restarted replica never got a request from the router")
        stats.append(f"SIGKILL under load: {len(results) - len(failed)}/{len(results)} answered, {len(failed)} errors "
                     "seen by clients, replica restarted and rejoined")

        # 3. SIGTERM drains: every admitted request ends whole.
        drained = st["replicas"][2]
        load = [{"model": model, "prompt": f"Tale {i}:", "max_tokens": 40, "ignore_eos": True} for i in range(9)]
        with cf.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(post, router, "/v1/completions", b, 120) for b in load]
            deadline = time.time() + 30
            while True:
                m = ss.parse_metrics(get(drained["url"], "/metrics")[1].decode())
                if m.get("specula_running_rows", 0) >= 1 or time.time() > deadline:
                    break
                time.sleep(0.05)
            os.kill(drained["pid"], signal.SIGTERM)
            results = [f.result(timeout=150) for f in futures]
        check(all(code == 200 and j["usage"]["completion_tokens"] == 40 for code, j in results),
              f"a request was cut by a replica's drain: {[r for r in results if r[0] != 200]}")
        stats.append(f"SIGTERM under load: {len(results)}/{len(results)} whole")
    finally:
        if rr is not None:
            rr.kill()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(150)
        except subprocess.TimeoutExpired:
            proc.kill()
    err = proc.stderr.read().decode(errors="replace")
    check(proc.returncode == 0, f"scripts/cluster exited {proc.returncode}:\n{err[-3000:]}")
    return "; ".join(stats)


if __name__ == "__main__":
    ss.run_main("test_cluster", main)
