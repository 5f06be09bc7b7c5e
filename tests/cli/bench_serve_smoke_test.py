"""Smoke test of bench/serve/bench_serve.py: the tiny model, kvfork paged only,
every scenario at --quick size. Checks that every scenario completes without
an error, that the JSON has every field the report promises, that the prefix
cache reaches the ideal reusable count where the issue sets a target, and that
the Markdown page and the charts are written."""

import json
import os
import shlex
import subprocess
import sys
import tempfile

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))

CELL_FIELDS = [
    "scenario", "server", "requests", "requests_ok", "error_count", "prompt_tokens", "cached_tokens",
    "ideal_cached_tokens", "ideal_floor_cached_tokens", "computed_prompt_tokens", "output_tokens",
    "ttft_p50_s", "ttft_p95_s", "itl_p50_s", "output_tokens_per_s", "wall_s", "peak_rss_bytes",
    "last_rss_bytes", "peak_kv_bytes", "peak_kv_bytes_server", "per_request", "command",
]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as out:
        expected = ["idle", "burst", "seqshare", "multiturn", "churn", "distinct_burst", "shared_prefix"]
        cmd = [sys.executable, os.path.join(SRC, "bench/serve/bench_serve.py"), "--quick", "--shape", "tiny",
               "--servers", "kvfork-paged", "--scenarios", ",".join(expected), "--max-model-len", "2048",
               "--idle-seconds", "0.5", "--kvfork", KVFORK,
               "--models-dir", os.path.join(BUILD, "test-data/bench-serve-models"),
               "--out", out, "--note", "a note with spaces"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        print(p.stdout[-3000:], p.stderr[-3000:])
        if p.returncode != 0:
            fail(f"bench_serve.py exited {p.returncode}")
        with open(os.path.join(out, "serve.json")) as f:
            data = json.load(f)
        for key in ("date", "command", "cpu", "load_before", "load_after", "shape", "threads", "params",
                    "kv_bytes_per_token", "max_model_len", "kv_cache_mib", "kvfork_commit"):
            if key not in data["meta"]:
                fail(f"meta has no {key}")
        # The recorded command can be pasted back into a shell as it ran.
        argv = shlex.split(data["meta"]["command"])
        if argv[0] != "bench/serve/bench_serve.py" or argv[argv.index("--note") + 1] != "a note with spaces":
            fail(f"meta command does not split back into the arguments: {data['meta']['command']}")
        cells = {c["scenario"]: c for c in data["cells"]}
        if sorted(cells) != sorted(expected):
            fail(f"scenarios {sorted(cells)}, expected {sorted(expected)}")
        for name, c in cells.items():
            for field in CELL_FIELDS:
                if field not in c:
                    fail(f"{name}: no field {field}")
            if c["error_count"] or c["requests_ok"] != c["requests"]:
                fail(f"{name}: {c['requests_ok']}/{c['requests']} ok, errors {c['errors']}")
            if not c["peak_rss_bytes"] or not c["last_rss_bytes"] or c["rss_samples"] < 3:
                fail(f"{name}: RSS was not sampled ({c['rss_samples']} samples)")
            if name == "idle":
                if c["requests"] != 0:
                    fail("idle sent requests")
                continue
            if c["requests"] == 0 or c["output_tokens"] <= 0 or c["ttft_p50_s"] is None:
                fail(f"{name}: no requests or no output ({c['requests']} requests)")
            for r in c["per_request"]:
                if r["ideal"] is None or r["cached_tokens"] is None:
                    fail(f"{name}: a request has no ideal or cached count: {r}")
                if r["cached_tokens"] > r["prompt_tokens"] - 1:
                    fail(f"{name}: cached {r['cached_tokens']} of {r['prompt_tokens']} prompt tokens")
        # The cache targets hold at this scale too (tail copy on).
        for name in ("burst", "seqshare", "multiturn", "shared_prefix"):
            c = cells[name]
            if c["ideal_cached_tokens"] <= 0:
                fail(f"{name}: ideal reusable count is {c['ideal_cached_tokens']}")
            if c["cached_tokens"] < 0.99 * c["ideal_cached_tokens"]:
                fail(f"{name}: cached {c['cached_tokens']} < 99% of ideal {c['ideal_cached_tokens']}")
        if cells["burst"]["peak_kv_bytes_server"] <= 0:
            fail("burst: kvfork reported no KV bytes")
        targets = {t["target"]: t for t in data["targets"]}
        lost = targets.get("no scenario loses a request or returns an error")
        if not lost or lost["ok"] is not True:
            fail(f"the no-error target is missing or false: {lost}")
        with open(os.path.join(out, "README.md")) as f:
            page = f.read()
        for needle in ("## Targets (issues 7, 21 and 26)", "### burst", "### shared_prefix",
                       "kvfork paged (tail copy on)"):
            if needle not in page:
                fail(f"README.md lacks {needle!r}")
        for png in ("serve_cached_tokens.png", "serve_peak_rss.png", "serve_ttft.png"):
            path = os.path.join(out, png)
            if not os.path.exists(path) or os.path.getsize(path) < 1000:
                fail(f"chart {png} missing or empty")
            with open(path, "rb") as f:
                if f.read(8) != b"\x89PNG\r\n\x1a\n":
                    fail(f"{png} is not a PNG")
            if f"]({png})" not in page:
                fail(f"README.md does not show {png}")
        check_smallpool(os.path.join(out, "smallpool"))
    print("bench_serve smoke test: ok")


def check_smallpool(out):
    """smallpool_burst on kvfork paged with bf16 and int8 KV: the pool is sized
    by the scenario (the same MiB for both), too small for bf16 to keep every
    system prompt (blocks are evicted, the hit rate after the cold round is
    below 100%), int8 keeps at least as much; the dense backend is not run."""
    groups, rounds = 8, 3
    cmd = [sys.executable, os.path.join(SRC, "bench/serve/bench_serve.py"), "--quick", "--shape", "tiny",
           "--servers", "kvfork-paged,kvfork-int8,kvfork-dense", "--scenarios", "smallpool_burst",
           "--max-model-len", "2048", "--smallpool-groups", str(groups), "--smallpool-rounds", str(rounds),
           "--smallpool-system-tokens", "1000", "--no-charts", "--kvfork", KVFORK,
           "--models-dir", os.path.join(BUILD, "test-data/bench-serve-models"), "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    print(p.stdout[-2000:], p.stderr[-2000:])
    if p.returncode != 0:
        fail(f"bench_serve.py smallpool_burst exited {p.returncode}")
    with open(os.path.join(out, "serve.json")) as f:
        data = json.load(f)
    cells = {c["server"]: c for c in data["cells"]}
    if sorted(cells) != ["kvfork-int8", "kvfork-paged"]:
        fail(f"smallpool_burst ran on {sorted(cells)}, expected kvfork-int8 and kvfork-paged")
    if not any("smallpool_burst on kvfork-dense" in n for n in data["meta"]["notes"]):
        fail(f"the notes do not say kvfork-dense was not run: {data['meta']['notes']}")
    bf16, int8 = cells["kvfork-paged"], cells["kvfork-int8"]
    mib = data["meta"]["params"]["smallpool_kv_cache_mib"]
    for c, dtype in ((bf16, "bf16"), (int8, "int8")):
        if c["error_count"] or c["requests"] != groups * rounds:
            fail(f"{dtype}: {c['requests_ok']}/{c['requests']} ok, errors {c['errors']}")
        pool_flag = f"--kv-cache-mib {mib}" in " ".join(c["command"])
        if c["kv_dtype"] != dtype or c["kv_cache_mib"] != mib or not pool_flag:
            fail(f"{dtype}: kv_dtype {c['kv_dtype']}, pool {c['kv_cache_mib']} MiB, expected {mib}")
        if not c["measured_ideal_cached_tokens"]:
            fail(f"{dtype}: no ideal reusable tokens after the cold round")
    rate = {d: c["measured_cached_tokens"] / c["measured_ideal_cached_tokens"]
            for c, d in ((bf16, "bf16"), (int8, "int8"))}
    if bf16["kvfork_cache_stats"]["evictions"] == 0 or rate["bf16"] >= 1.0:
        fail(f"bf16: the pool held every system prompt (evictions "
             f"{bf16['kvfork_cache_stats']['evictions']}, hit rate {rate['bf16']:.1%}): not a small pool")
    if int8["kvfork_cache_stats"]["blocks_total"] <= bf16["kvfork_cache_stats"]["blocks_total"]:
        fail("int8 KV fits no more blocks than bf16 in the same MiB")
    if rate["int8"] < rate["bf16"]:
        fail(f"int8 kept less than bf16: hit rate {rate['int8']:.1%} vs {rate['bf16']:.1%}")
    if not any(t["target"].startswith("smallpool_burst: KV int8") for t in data["targets"]):
        fail("no smallpool_burst target row for int8")
    print(f"smallpool_burst: {mib} MiB, hit rate after the cold round bf16 {rate['bf16']:.1%}, "
          f"int8 {rate['int8']:.1%}")


if __name__ == "__main__":
    main()
