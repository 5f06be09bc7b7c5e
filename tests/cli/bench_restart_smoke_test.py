"""Smoke test of bench/serve/bench_restart.py (issue 25's restart benchmark):
the tiny model, a 256-word conversation, every variant (llama.cpp's slot
save/restore only where .cache/llama-server is built; otherwise the script
must say it skipped it). Checks the prefix survives a clean restart (each
clean restart answers as the warm server did; sent after the preload ended,
the turn reads nothing itself) and a kill -9 after the writes settle, that
the cold start caches nothing, that the
break-even numbers and the JSON are written, and a flag error. Never checks
timings."""

import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))
SCRIPT = os.path.join(SRC, "bench/serve/bench_restart.py")
LLAMA = os.path.join(SRC, ".cache/llama-server/build/bin/llama-server")
BLOCK = 16


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, SCRIPT, "--shape", "tiny", "--context-tokens", "256", "--turns", "2",
               "--max-tokens", "4", "--threads", "1", "--settle-seconds", "0.5", "--kvfork", KVFORK,
               "--models-dir", os.path.join(BUILD, "test-data/bench-restart-models"),
               "--work-dir", os.path.join(out, "work"), "--log-dir", os.path.join(out, "logs"), "--out", out]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        print(p.stdout[-4000:], p.stderr[-3000:])
        if p.returncode != 0:
            fail(f"bench_restart.py exited {p.returncode}")
        with open(os.path.join(out, "restart.json")) as f:
            data = json.load(f)
        for key in ("date", "command", "cpu", "cores", "load_before", "load_after", "shape", "context_tokens",
                    "kv_bytes_per_token", "max_model_len", "kill9_pool_blocks", "kvfork_commit"):
            if key not in data["meta"]:
                fail(f"meta has no {key}")
        rows = data["rows"]
        have_llama = os.access(LLAMA, os.X_OK)
        want = ["warm", "restart", "restart-preloaded", "restart-nopreload", "kill9", "cold"] + (["llama.cpp"] if have_llama else [])
        if sorted(rows) != sorted(want):
            fail(f"variants {sorted(rows)}, expected {sorted(want)}")
        if not have_llama and not any("llama.cpp skipped" in n for n in data["meta"]["notes"]):
            fail("llama-server is missing but the notes do not say llama.cpp was skipped")
        for name, r in rows.items():
            if "error" in r:
                fail(f"{name}: {r['error']}")
            if r["ttft_s"] is None or r["ttft_s"] <= 0 or r["prompt_tokens"] <= 0:
                fail(f"{name}: no TTFT or prompt tokens: {r}")
        prompt = rows["warm"]["prompt_tokens"]
        for name in want:
            if rows[name]["prompt_tokens"] != prompt:
                fail(f"{name}: {rows[name]['prompt_tokens']} prompt tokens, warm had {prompt}: "
                     "not the same conversation")
        warm = rows["warm"]["cached_tokens"]
        if warm < prompt - 64:
            fail(f"warm server cached {warm} of {prompt}")
        # After a clean restart the history comes back from disk whole: every
        # full block and the partial tail block the shutdown wrote, so exactly
        # the warm server's tokens. kill -9 keeps only what evictions wrote:
        # full blocks.
        for name in ("restart", "restart-preloaded", "restart-nopreload", "kill9"):
            r = rows[name]
            clean = name != "kill9"
            if r["files_on_disk"] <= 0:
                fail(f"{name}: no block files on disk before the new server started")
            if clean:
                if r["cached_tokens"] != warm:
                    fail(f"{name}: cached {r['cached_tokens']} after the restart, warm {warm}")
                # The same cached KV and the same few new tokens: greedy
                # decoding must answer as the warm server did.
                if r["text"] != rows["warm"]["text"]:
                    fail(f"{name}: answered {r['text']!r}, the warm server {rows['warm']['text']!r}")
            elif r["cached_tokens"] < BLOCK * (warm // BLOCK) - BLOCK or r["cached_tokens"] % BLOCK:
                fail(f"{name}: cached {r['cached_tokens']} after the restart, warm {warm}")
            # Read by the turn itself or by the preload at start before it;
            # a clean restart's partial tail block (at most BLOCK - 1 tokens)
            # counts as one block.
            from_disk = r["disk"]["hit_blocks"] + r["disk"].get("preloaded_blocks", 0)
            if from_disk * BLOCK < r["cached_tokens"] or r["disk"]["corrupt_blocks"]:
                fail(f"{name}: the cached tokens did not come from disk: {r['disk']}")
        # The preload at start (on by default) read blocks; off, none.
        if rows["restart"]["disk"]["preloaded_blocks"] <= 0 or "preload_running_at_turn" not in rows["restart"]:
            fail(f"restart: no preload at start: {rows['restart']['disk']}")
        # Sent once the preload had ended: the conversation (far under half
        # the pool) was all in RAM, so the turn read no block itself; the
        # wait is reported from the server's start.
        r = rows["restart-preloaded"]
        if r["preload_running_at_turn"] is not False or r["disk"]["preloaded_blocks"] <= 0:
            fail(f"restart-preloaded: the turn did not wait for a preload that read blocks: {r}")
        if r["disk"]["hit_blocks"] != 0:
            fail(f"restart-preloaded: the turn read {r['disk']['hit_blocks']} blocks after the preload ended")
        if not r["start_s"] <= r["preload_end_s"] < 300:
            fail(f"restart-preloaded: preload end {r['preload_end_s']} s, /health {r['start_s']} s after start")
        if rows["restart-nopreload"]["disk"]["preloaded_blocks"] != 0:
            fail(f"restart-nopreload preloaded: {rows['restart-nopreload']['disk']}")
        if rows["kill9"]["disk_before_kill"]["blocks_written"] <= 0:
            fail("kill9: nothing was written before SIGKILL")
        if rows["cold"]["cached_tokens"] != 0:
            fail(f"cold start cached {rows['cold']['cached_tokens']} tokens on an empty directory")
        if have_llama:
            r = rows["llama.cpp"]
            if r["restore_response"].get("n_restored", 0) <= 0 or r["saved_bytes"] <= 0:
                fail(f"llama.cpp restore restored nothing: {r['restore_response']}")
        be = data["break_even"]
        if not be or be["prefill_tokens_per_s"] <= 0 or be["compute_s_per_block"] <= 0:
            fail(f"no break-even numbers: {be}")
        for key in ("dropped_cache", "page_cache"):
            if not be[key]["bytes_per_s"] or be[key]["read_s_per_block"] <= 0:
                fail(f"break-even {key}: {be[key]}")
        for needle in ("| variant | next-turn TTFT ms", "| restart |", "| restart-preloaded |", "| kill9 |", "| cold |", "break-even (",
                       "load"):
            if needle not in p.stdout:
                fail(f"the printed table lacks {needle!r}")
    bad = subprocess.run([sys.executable, SCRIPT, "--variants", "warm,reboot", "--kvfork", KVFORK],
                         capture_output=True, text=True, timeout=60)
    if bad.returncode != 2 or "reboot" not in bad.stderr:
        fail(f"an unknown variant exited {bad.returncode}: {bad.stderr}")
    print("bench_restart smoke test: ok")


if __name__ == "__main__":
    main()
