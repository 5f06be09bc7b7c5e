"""A sliding-window model on the real `kvfork serve` (issue 24): a tiny
Gemma 3 (six layers, five with a window of 32 tokens, block 16) serves a
prompt longer than the window; then

  1. /v1/cache/stats reports its sliding group (window 32): nothing used after
     the request, every block free or cached, a peak of at most
     ceil((32 + 32) / 16) + 1 = 5 blocks however long the request (a prefill
     chunk of 32 tokens, --max-num-batched-tokens, holds its own positions and
     the window before them: the memory bound of docs/kv_cache.md "Sliding
     windows"), the window before the end kept cached for the next turn, and
     the KV check holds;
  2. the next turn, the same prompt and more, reuses the prefix
     (cached_tokens > 0);
  3. /metrics' kvfork_kv_sliding_* series, labelled by window, equal the stats.
"""

import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvfork_test_env import KVFORK, QWEN_TOKENIZER, fail, free_port, http, start_server  # noqa: E402

WINDOW, BLOCK, CHUNK = 32, 16, 32


def metric(text, name, labels):
    for line in text.splitlines():
        if line.startswith(name + "{") and labels in line:
            return float(line.split()[-1])
    fail(f"/metrics has no {name} with {labels}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gemma3")
        p = subprocess.run([KVFORK, "make-model", "--arch", "gemma3", "--shape", "tiny", "--layers", "6",
                            "--sliding-window", str(WINDOW), "--seed", "4", "--tokenizer",
                            QWEN_TOKENIZER, "--out", model], capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"make-model exited {p.returncode}: {p.stderr[-2000:]}")
        port = free_port()
        with open(os.path.join(tmp, "server.log"), "w") as log:
            proc = start_server([KVFORK, "serve", "--model", model, "--port", str(port),
                                 "--served-model-name", "g3", "--kv-block-size", str(BLOCK), "--threads", "2",
                                 "--max-num-batched-tokens", str(CHUNK)],
                                port, log)
            try:
                prompt = " ".join(f"line {i} names the colour of box {i * 3}" for i in range(24))
                code, first = http(port, "POST", "/v1/completions",
                                   {"model": "g3", "prompt": prompt, "max_tokens": 40,
                                    "temperature": 0, "ignore_eos": True})
                if code != 200:
                    fail(f"first request: {code} {first}")
                prompt_tokens = first["usage"]["prompt_tokens"]
                if prompt_tokens + 40 <= 4 * WINDOW:
                    fail(f"the prompt ({prompt_tokens} tokens) should be well past the window")

                code, stats = http(port, "GET", "/v1/cache/stats?check=1")
                if code != 200 or stats.get("kv_check") != "ok":
                    fail(f"/v1/cache/stats?check=1: {code} {stats}")
                groups = stats.get("sliding_groups")
                if not isinstance(groups, list) or len(groups) != 1:
                    fail(f"sliding_groups should list the one sliding group: {stats}")
                g = groups[0]
                print("sliding group:", g)
                if g["window"] != WINDOW or g["blocks_used"] != 0:
                    fail(f"window {g['window']} (want {WINDOW}), used {g['blocks_used']} (want 0)")
                if g["blocks_free"] + g["blocks_cached"] != g["blocks_total"]:
                    fail(f"free + cached != total: {g}")
                bound = -(-(WINDOW + CHUNK) // BLOCK) + 1
                if not 1 <= g["peak_used_blocks"] <= bound:
                    fail(f"peak {g['peak_used_blocks']} sliding blocks, bound {bound}")
                if g["blocks_cached"] < 1 or g["block_bytes"] <= 0:
                    fail(f"the window before the end should stay cached: {g}")

                code, second = http(port, "POST", "/v1/completions",
                                    {"model": "g3", "prompt": prompt + " and one more line", "max_tokens": 2,
                                     "temperature": 0})
                if code != 200:
                    fail(f"second request: {code} {second}")
                cached = second["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
                if cached < BLOCK:
                    fail(f"the next turn reused {cached} tokens, want at least a block")

                code, stats = http(port, "GET", "/v1/cache/stats")
                code_m, text = http(port, "GET", "/metrics")
                if code != 200 or code_m != 200:
                    fail(f"/v1/cache/stats {code}, /metrics {code_m}")
                g = stats["sliding_groups"][0]
                labels = f'window="{WINDOW}"'
                for field, name in [("blocks_total", "blocks_total"), ("blocks_free", "blocks_free"),
                                    ("blocks_used", "blocks_used"), ("blocks_cached", "blocks_cached"),
                                    ("evictions", "evictions_total"),
                                    ("pinned_evictions", "pinned_evictions_total")]:
                    got = metric(text, "kvfork_kv_sliding_" + name, labels)
                    if got != g[field]:
                        fail(f"kvfork_kv_sliding_{field} {got} != stats {g[field]}")
                if metric(text, "kvfork_kv_sliding_block_bytes", labels) != g["block_bytes"]:
                    fail("kvfork_kv_sliding_block_bytes differs from the stats")
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
    print("ok")


if __name__ == "__main__":
    main()
