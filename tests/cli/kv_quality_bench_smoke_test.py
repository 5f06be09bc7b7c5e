"""Smoke test of bench/kv_quality/kv_quality.py on the trained model (4M
parameters) with a short context and four chunks: it runs, prints its table,
and writes a JSON row per KV format with the statistics in range. kvfork's f32
against bf16 base is a tested row too, and the KIVI simulation's kivi4 row
(labelled simulated, with --kivi-group-tokens passed on); when llama.cpp's llama-perplexity is
built (scripts/setup-llama-tools.sh) its rows are checked as well, including
that the Hadamard rotation is on for q4_0 and off for the no-rotation row.
Never the values themselves: bench/results/kv_quality.json has the measurement."""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvfork_test_env import CACHE, KVFORK, SRC, fail  # noqa: E402

CTX = 64
CHUNKS = 4  # llama-perplexity prints its statistics from 100 positions on


def main():
    llama_bin = os.path.join(CACHE, "llama-server/build/bin")
    have_llama = os.access(os.path.join(llama_bin, "llama-perplexity"), os.X_OK)
    script = os.path.join(SRC, "bench/kv_quality/kv_quality.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "kv_quality.json")
        cmd = [sys.executable, script, "--kvfork", KVFORK, "--ctx", str(CTX), "--chunks", str(CHUNKS),
               "--kvfork-kv", "int8,f32,kivi4", "--kivi-group-tokens", "8", "--llama-kv", "q4_0,q4_0-norot", "--llama-bin", llama_bin,
               "--work", os.path.join(tmp, "work"), "--out", out]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        print(p.stdout[-3000:], p.stderr[-3000:])
        if p.returncode != 0:
            fail(f"kv_quality.py exited {p.returncode}")
        if "| engine | KV against base |" not in p.stdout:
            fail("no table printed")
        with open(out) as f:
            data = json.load(f)
        rows = {(r["engine"], r["kv"]): r for r in data["rows"]}
        kivi = "kivi4 (simulated; K per channel, groups of 8 tokens)"
        want = [("kvfork", "int8"), ("kvfork", "f32"), ("kvfork", kivi)]
        if have_llama:
            want += [("llama.cpp", k) for k in ("q4_0", "q4_0-norot")]
        elif not any("llama.cpp skipped" in n for n in data["meta"]["notes"]):
            fail("llama.cpp is not built but the notes do not say it was skipped")
        if sorted(rows) != sorted(want):
            fail(f"rows {sorted(rows)}, expected {sorted(want)}")
        positions = CHUNKS * (CTX - CTX // 2 - 1)
        if data["meta"]["positions"] != positions or rows[("kvfork", "int8")]["positions"] != positions:
            fail(f"positions {data['meta']['positions']}, expected {positions}")
        for key, r in rows.items():
            if not 0 <= r["top1_agreement"] <= 1:
                fail(f"{key}: top-1 agreement {r['top1_agreement']}")
            # llama.cpp's base log-probabilities are stored in 16 bits, so its
            # KL can come out a little below 0 (-1e-6 for f16 against f16).
            if not r["kl_max"] >= r["kl_p99"] >= r["kl_median"] >= -1e-4 or r["kl_mean"] < -1e-4:
                fail(f"{key}: KL statistics out of order: {r}")
            if not r["ppl_base"] > 1 or not r["ppl_tested"] > 1:
                fail(f"{key}: perplexities {r['ppl_base']}, {r['ppl_tested']}")
        if "--kivi-group-tokens 8 --kivi-keys channel" not in rows[("kvfork", kivi)]["command"]:
            fail(f"the kivi4 row's command does not pass the group: {rows[('kvfork', kivi)]['command']}")
        if have_llama:
            if rows[("llama.cpp", "q4_0")]["hadamard_rotation"] is not True or \
                    rows[("llama.cpp", "q4_0-norot")]["hadamard_rotation"] is not False:
                fail("llama.cpp's Hadamard rotation: on for q4_0 and off for q4_0-norot expected")
        for key in ("date", "model", "text", "ctx", "command", "kvfork_commit"):
            if key not in data["meta"]:
                fail(f"meta has no {key}")
        bad = subprocess.run([sys.executable, script, "--llama-kv", "q3_x"], capture_output=True, text=True)
        if bad.returncode == 0 or "--llama-kv: unknown row 'q3_x'" not in bad.stderr:
            fail(f"--llama-kv q3_x: exit {bad.returncode}, {bad.stderr[-300:]}")
    print("PASS")


if __name__ == "__main__":
    main()
