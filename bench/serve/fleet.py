#!/usr/bin/env python3
"""Fleet simulation: 4 kvfork replicas on loopback behind three test routers.

The question is whether kvfork's KV events carry what a precise prefix-aware
router (llm-d's precise prefix-cache scorer) needs. The routers here are a
test harness, not a product; the scale-out engine is llm-d
(docs/scale-out.md). Each policy gets fresh replicas (cold caches) and the
same workload:

  round-robin   replicas in turn;
  metrics       sees only /metrics, as a router without events does: the
                fewest vllm:num_requests_waiting + running, then the lowest
                vllm:kv_cache_usage_perc, then in turn;
  events        subscribes to every replica's --kv-events (the vLLM-schema
                subscriber in tools/kv_events), keys blocks from the token ids
                and block size the events carry (its own chained keys, as
                llm-d does), and picks the longest cached prefix of the
                request's full blocks, then the fewest requests in flight.

Workload: conversations, each behind one of a few shared system prompts,
several turns each (the next turn's prompt is the last prompt, a reply and a
new user message), as token-id prompts to /v1/completions (streamed, so TTFT
is measured at the first chunk). Reported per policy: the prefix hit rate
(cached / prompt tokens, from each response's usage), TTFT p50/p95/mean,
requests per replica, wall time. A table on stdout, JSON in <out>/fleet.json
and under "fleet" in <out>/serve.json when that file exists.

  bench/serve/fleet.py [--quick] [--shape tiny|default-50m] [--out DIR]
"""

import argparse
import datetime
import http.client
import json
import os
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools/kv_events"))

from servers import free_port, http_json  # noqa: E402
from kv_event_subscriber import Subscriber  # noqa: E402

POLICIES = ["round-robin", "metrics", "events"]

# Workload sizes: (full, --quick).
PARAMS = {
    "replicas": (4, 4),
    "system_prompts": (8, 4),
    "system_tokens": (512, 192),
    "conversations": (48, 16),
    "turns": (3, 2),
    "user_tokens": (48, 24),
    "reply_tokens": (16, 8),
    "max_tokens": (8, 4),
    "concurrency": (8, 4),
    # Per-replica pool: less than all system prompts, more than a share of them.
    "kv_blocks": (160, 40),
}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the small workload (the smoke test's)")
    ap.add_argument("--shape", default="", help="model shape (default default-50m; tiny with --quick)")
    ap.add_argument("--threads", type=int, default=1, help="compute threads per replica (default 1)")
    ap.add_argument("--kvfork", default=os.path.join(ROOT, "build/release/src/cli/kvfork"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "models/bench"))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--out", default="", help="output directory (default bench/results; "
                    "out/bench-fleet-quick with --quick)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    a.params = {k: v[1 if a.quick else 0] for k, v in PARAMS.items()}
    a.shape = a.shape or ("tiny" if a.quick else "default-50m")
    a.out = a.out or os.path.join(ROOT, "out/bench-fleet-quick" if a.quick else "bench/results")
    a.policies = [p for p in a.policies.split(",") if p]
    for p in a.policies:
        if p not in POLICIES:
            ap.error(f"--policies: unknown policy {p!r} (known: {', '.join(POLICIES)})")
    return a


def prepare_model(a):
    d = os.path.join(a.models_dir, a.shape)
    if not os.path.exists(os.path.join(d, "config.json")):
        tok = os.path.join(ROOT, ".cache/npm/tokenizer-qwen3/package/models")
        p = subprocess.run([a.kvfork, "make-model", "--arch", "qwen3", "--shape", a.shape, "--seed", "1",
                            "--dtype", "bf16", "--tokenizer", tok, "--out", d], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"fleet: make-model failed: {p.stderr[-2000:]}")
    return d


class Replica:
    def __init__(self, a, model, index, log_dir):
        self.port, self.pub, self.replay = free_port(), free_port(), free_port()
        self.cmd = [a.kvfork, "serve", "--model", model, "--served-model-name", "fleet",
                    "--host", "127.0.0.1", "--port", str(self.port), "--threads", str(a.threads),
                    "--kv-backend", "paged", "--kv-blocks", str(a.params["kv_blocks"]),
                    "--max-num-seqs", "4", "--kv-events", f"tcp://*:{self.pub}",
                    "--kv-events-replay", f"tcp://*:{self.replay}",
                    "--kv-events-topic", f"kv@replica{index}@fleet"]
        os.makedirs(log_dir, exist_ok=True)
        self.log = open(os.path.join(log_dir, f"replica{index}.log"), "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout=300):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"fleet: a replica exited {self.proc.returncode}; see {self.log.name}")
            try:
                if http_json(self.port, "GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("fleet: a replica was not ready in time")

    def metrics(self):
        code, text = http_json(self.port, "GET", "/metrics", timeout=10)
        out = {}
        for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                     "kvfork_kv_events_dropped_total", "kvfork_kv_events_published_total"):
            m = re.search(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)$", text, re.M)
            out[name] = float(m.group(1)) if m else 0.0
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class RoundRobin:
    def __init__(self, replicas):
        self.n, self.next = len(replicas), 0
        self.lock = threading.Lock()

    def pick(self, tokens, inflight):
        with self.lock:
            i = self.next
            self.next = (self.next + 1) % self.n
            return i


class MetricsOnly:
    """What a router without events sees: queue, running and KV usage."""

    def __init__(self, replicas):
        self.replicas = replicas
        self.rr = RoundRobin(replicas)

    def pick(self, tokens, inflight):
        m = [r.metrics() for r in self.replicas]
        offset = self.rr.pick(tokens, inflight)
        order = [(offset + k) % len(m) for k in range(len(m))]
        return min(order, key=lambda i: (m[i]["vllm:num_requests_waiting"] + m[i]["vllm:num_requests_running"],
                                         m[i]["vllm:kv_cache_usage_perc"]))


def chunk_keys(tokens, block_size):
    """The router's own chained keys of a token sequence's full blocks."""
    keys, parent = [], None
    for i in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[i:i + block_size])))
        keys.append(parent)
    return keys


class PreciseEvents:
    """Longest cached prefix from the replicas' KV events, then load."""

    def __init__(self, replicas):
        self.subs = [Subscriber(f"tcp://127.0.0.1:{r.pub}", f"tcp://127.0.0.1:{r.replay}", topic="kv@")
                     for r in replicas]

    def replica_keys(self, sub):
        # Engine hash -> the router's key, computed from the token ids each
        # BlockStored carried and its parent's key (llm-d does the same).
        with sub.replica.lock:
            blocks = dict(sub.replica.blocks)
        memo = {}

        def key(h):
            if h in memo:
                return memo[h]
            parent, toks = blocks[h]
            k = hash((key(parent) if parent in blocks else None, tuple(toks)))
            memo[h] = k
            return k

        return {key(h) for h in blocks}

    def pick(self, tokens, inflight):
        block_size = next((s.replica.block_size for s in self.subs if s.replica.block_size), 16)
        want = chunk_keys(tokens, block_size)
        best, best_score = 0, None
        for i, sub in enumerate(self.subs):
            have = self.replica_keys(sub)
            hit = 0
            while hit < len(want) and want[hit] in have:
                hit += 1
            score = (hit, -inflight[i])
            if best_score is None or score > best_score:
                best, best_score = i, score
        return best

    def close(self):
        for s in self.subs:
            s.close()


def stream_completion(port, tokens, max_tokens):
    """One streamed /v1/completions; returns (ttft seconds, usage dict)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": "fleet", "prompt": tokens, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
        ttft, usage = None, None
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if ttft is None and chunk.get("choices"):
                ttft = time.monotonic() - t0
            if chunk.get("usage"):
                usage = chunk["usage"]
        return ttft, usage
    finally:
        conn.close()


def make_workload(p, seed):
    rng = random.Random(seed)
    tok = lambda n: [rng.randrange(1000, 60000) for _ in range(n)]  # noqa: E731
    systems = [tok(p["system_tokens"]) for _ in range(p["system_prompts"])]
    convs = []
    for c in range(p["conversations"]):
        turns = []
        for _ in range(p["turns"]):
            turns.append((tok(p["reply_tokens"]), tok(p["user_tokens"])))
        convs.append((systems[c % len(systems)], turns))
    rng.shuffle(convs)
    return convs


def run_policy(a, model, policy, log_dir):
    p = a.params
    replicas = [Replica(a, model, i, os.path.join(log_dir, policy)) for i in range(p["replicas"])]
    router = None
    try:
        for r in replicas:
            r.wait_ready()
        router = {"round-robin": RoundRobin, "metrics": MetricsOnly, "events": PreciseEvents}[policy](replicas)
        time.sleep(0.3)  # subscribers join
        convs = make_workload(p, a.seed)
        inflight = [0] * len(replicas)
        lock = threading.Lock()
        results, errors = [], []
        per_replica = [0] * len(replicas)

        def conversation(system, turns):
            prompt = list(system)
            for t, (reply, user) in enumerate(turns):
                if t > 0:
                    prompt += reply  # stands in for the last answer
                prompt += user
                with lock:
                    i = router.pick(prompt, list(inflight))
                    inflight[i] += 1
                    per_replica[i] += 1
                try:
                    ttft, usage = stream_completion(replicas[i].port, prompt, p["max_tokens"])
                    cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                    with lock:
                        results.append({"replica": i, "prompt_tokens": len(prompt), "cached_tokens": cached,
                                        "ttft_s": ttft})
                except Exception as e:  # noqa: BLE001 - counted and reported
                    with lock:
                        errors.append(str(e)[:300])
                finally:
                    with lock:
                        inflight[i] -= 1

        t0 = time.monotonic()
        pending = list(convs)
        plock = threading.Lock()

        def worker():
            while True:
                with plock:
                    if not pending:
                        return
                    system, turns = pending.pop()
                conversation(system, turns)

        workers = [threading.Thread(target=worker) for _ in range(p["concurrency"])]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall = time.monotonic() - t0
        m = [r.metrics() for r in replicas]
        ttfts = sorted(r["ttft_s"] for r in results if r["ttft_s"] is not None)
        prompt_tokens = sum(r["prompt_tokens"] for r in results)
        cached = sum(r["cached_tokens"] for r in results)
        q = lambda f: ttfts[min(len(ttfts) - 1, int(f * len(ttfts)))] if ttfts else None  # noqa: E731
        return {
            "policy": policy, "requests": len(results) + len(errors), "requests_ok": len(results),
            "errors": errors[:5], "prompt_tokens": prompt_tokens, "cached_tokens": cached,
            "prefix_hit_rate": cached / prompt_tokens if prompt_tokens else 0.0,
            "ttft_p50_s": q(0.5), "ttft_p95_s": q(0.95),
            "ttft_mean_s": statistics.fmean(ttfts) if ttfts else None, "wall_s": wall,
            "requests_per_replica": per_replica,
            "kv_events_published": sum(x["kvfork_kv_events_published_total"] for x in m),
            "kv_events_dropped": sum(x["kvfork_kv_events_dropped_total"] for x in m),
        }
    finally:
        if isinstance(router, PreciseEvents):
            router.close()
        for r in replicas:
            r.stop()


def main(argv):
    a = parse_args(argv)
    if not os.access(a.kvfork, os.X_OK):
        raise SystemExit(f"fleet: no kvfork binary at {a.kvfork} (run `make build`)")
    model = prepare_model(a)
    log_dir = os.path.join(ROOT, "out/bench-fleet-logs")
    load_before = os.getloadavg()
    rows = []
    for policy in a.policies:
        print(f"fleet: {policy} ...", end="", flush=True)
        row = run_policy(a, model, policy, log_dir)
        rows.append(row)
        print(f" {row['wall_s']:.1f} s, hit rate {row['prefix_hit_rate']:.3f}, "
              f"{row['requests_ok']}/{row['requests']} ok", flush=True)
    result = {
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": shlex.join(["bench/serve/fleet.py"] + argv), "shape": a.shape,
            "threads_per_replica": a.threads, "params": a.params, "seed": a.seed,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "cores": os.cpu_count(),
            "note": "the routers are a test harness showing what the KV events carry, not a product; "
                    "replicas share the machine's cores, so TTFT includes their contention",
        },
        "policies": rows,
    }
    print()
    print(f"{'policy':<12} {'requests':>8} {'hit rate':>8} {'TTFT p50 ms':>11} {'TTFT p95 ms':>11} "
          f"{'wall s':>7}  per replica")
    for r in rows:
        fmt = lambda v: f"{v * 1e3:.0f}" if v is not None else "-"  # noqa: E731
        print(f"{r['policy']:<12} {r['requests_ok']:>8} {r['prefix_hit_rate']:>8.3f} {fmt(r['ttft_p50_s']):>11} "
              f"{fmt(r['ttft_p95_s']):>11} {r['wall_s']:>7.1f}  {r['requests_per_replica']}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "fleet.json"), "w") as f:
        json.dump(result, f, indent=1)
    serve_json = os.path.join(a.out, "serve.json")
    if os.path.exists(serve_json):
        with open(serve_json) as f:
            serve = json.load(f)
        serve["fleet"] = result
        with open(serve_json + ".tmp", "w") as f:
            json.dump(serve, f, indent=1)
        os.replace(serve_json + ".tmp", serve_json)
    print(f"fleet: wrote {a.out}/fleet.json" + (" and serve.json's \"fleet\"" if os.path.exists(serve_json) else ""))
    return 1 if any(r["requests_ok"] != r["requests"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
