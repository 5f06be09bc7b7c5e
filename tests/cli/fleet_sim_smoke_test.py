"""Smoke test of bench/serve/fleet.py --quick: 4 tiny kvfork replicas with
--kv-events behind round-robin, metrics-only and event-driven test routers.
Checks that every request succeeds, the JSON has every promised field, the
replicas published events and dropped none, and that routing by the events
reuses more of the prompts than round-robin does (the workload's system
prompts do not all fit one replica's pool, so spreading them costs hits)."""

import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))

FIELDS = ["policy", "requests", "requests_ok", "prompt_tokens", "cached_tokens", "prefix_hit_rate",
          "ttft_p50_s", "ttft_p95_s", "ttft_mean_s", "wall_s", "requests_per_replica",
          "kv_events_published", "kv_events_dropped"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as out:
        # An existing serve.json gains a "fleet" key.
        with open(os.path.join(out, "serve.json"), "w") as f:
            json.dump({"meta": {}, "cells": []}, f)
        p = subprocess.run([sys.executable, os.path.join(SRC, "bench/serve/fleet.py"), "--quick",
                            "--kvfork", KVFORK, "--models-dir", os.path.join(BUILD, "test-data/fleet-models"),
                            "--out", out], capture_output=True, text=True, timeout=240)
        print(p.stdout[-3000:], p.stderr[-3000:])
        if p.returncode != 0:
            fail(f"fleet.py exited {p.returncode}")
        with open(os.path.join(out, "fleet.json")) as f:
            data = json.load(f)
        with open(os.path.join(out, "serve.json")) as f:
            if json.load(f).get("fleet") != data:
                fail("serve.json has no matching \"fleet\"")
        rows = {r["policy"]: r for r in data["policies"]}
        if sorted(rows) != ["events", "metrics", "round-robin"]:
            fail(f"policies {sorted(rows)}")
        for name, r in rows.items():
            for field in FIELDS:
                if field not in r:
                    fail(f"{name}: no field {field}")
            if r["requests"] == 0 or r["requests_ok"] != r["requests"]:
                fail(f"{name}: {r['requests_ok']}/{r['requests']} ok: {r['errors']}")
            if r["kv_events_published"] <= 0 or r["kv_events_dropped"] != 0:
                fail(f"{name}: events published {r['kv_events_published']}, dropped {r['kv_events_dropped']}")
            if len(r["requests_per_replica"]) != 4:
                fail(f"{name}: {len(r['requests_per_replica'])} replicas")
        if rows["events"]["prefix_hit_rate"] <= rows["round-robin"]["prefix_hit_rate"]:
            fail(f"routing by events hit {rows['events']['prefix_hit_rate']:.3f}, round-robin "
                 f"{rows['round-robin']['prefix_hit_rate']:.3f}")
        for line in ("policy", "round-robin", "metrics", "events"):
            if not any(l.startswith(line) for l in p.stdout.splitlines()):
                fail(f"no table row {line}")
    print("PASS")


if __name__ == "__main__":
    main()
