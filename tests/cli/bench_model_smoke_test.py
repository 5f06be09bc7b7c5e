"""Smoke test of `kvfork bench model` on a tiny model (the real benchmark runs
qwen3-0.6b and never runs here): the table and JSON have every row and field,
the reported prefill time is the median of the timed runs, the first call
(buffers not yet sized) is reported separately, decode is greedy and so
repeatable, --kv-dtype picks the KV it runs on, --json makes its directories
or fails naming the path, and a bad flag is refused with a message that
names it."""

import json
import os
import statistics
import subprocess
import sys
import tempfile

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.environ.get("KVFORK_CACHE_DIR", os.path.join(SRC, ".cache"))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))
TOKENIZER = os.path.join(CACHE, "npm/tokenizer-qwen3/package/models")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(args, timeout=120):
    return subprocess.run([KVFORK] + args, capture_output=True, text=True, timeout=timeout)


def bench(model, out, extra=()):
    p = run(["bench", "model", "--shape", "qwen3-0.6b", "--model", model, "--threads", "2",
             "--prompt-tokens", "40", "--decode-tokens", "4", "--prefill-runs", "3", "--json", out]
            + list(extra))
    if p.returncode != 0:
        fail(f"bench model exited {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    return p.stdout, json.load(open(out))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        p = run(["make-model", "--arch", "qwen3", "--shape", "tiny", "--seed", "3", "--tokenizer",
                 TOKENIZER, "--out", model])
        if p.returncode != 0:
            fail(f"make-model exited {p.returncode}: {p.stderr[-2000:]}")

        table, j = bench(model, os.path.join(tmp, "a.json"))
        print(table)
        for metric in ["read bandwidth", "peak amx bf16", "prefill", "decode", "decode weights"]:
            if not any(line.startswith(metric) for line in table.splitlines()):
                fail(f"table has no row {metric!r}")
        for field in ["prefill_s", "prefill_runs_s", "prefill_first_call_s", "prefill_flops",
                      "decode_s", "generated_tokens", "rows", "read_bandwidth_gbps"]:
            if field not in j:
                fail(f"JSON has no field {field!r}")
        if j.get("kv_dtype") != "bf16":
            fail(f"kv_dtype {j.get('kv_dtype')!r}, want the default bf16")
        # The peak is the better of a sample before the model and one after.
        got = j.get("peak_bf16_best_samples_gflops")
        if not isinstance(got, list) or len(got) != 2 or min(got) <= 0:
            fail(f"peak_bf16_best_samples_gflops should hold 2 positive samples, got {got}")
        if j["peak_bf16_best_gflops"] != max(got):
            fail(f"peak_bf16_best_gflops {j['peak_bf16_best_gflops']} is not the larger of {got}")
        # The decode's bandwidth: reads before each of 4 rounds and after the
        # last, their median (one stalled read must not lower the limit).
        got = j.get("read_bandwidth_samples_gbps")
        if not isinstance(got, list) or len(got) != 5 or min(got) <= 0:
            fail(f"read_bandwidth_samples_gbps should hold 5 positive samples, got {got}")
        want = statistics.median(got)
        if abs(j["read_bandwidth_gbps"] - want) > 1e-9 * want:
            fail(f"read_bandwidth_gbps {j['read_bandwidth_gbps']} is not the median of {got}")
        # The decode's compute bound: its matrices' compute in L2 (per format,
        # summing to the compute time and to the weights one step reads, the
        # embedding row aside), and the fractions of the limit with no
        # overlap, 1 / (read + compute), and perfect overlap, 1 / max(...).
        compute = j.get("decode_compute_s_per_token", 0)
        by_format = j.get("decode_compute_by_format", [])
        if compute <= 0 or not by_format:
            fail(f"no decode compute: {compute}, {by_format}")
        if abs(sum(f["seconds_per_token"] for f in by_format) - compute) > 1e-9 * compute:
            fail(f"per-format compute {by_format} does not sum to {compute}")
        if [f["dtype"] for f in by_format] != ["bf16"]:
            fail(f"a bf16 model's matrices should all be bf16: {by_format}")
        weights = j["decode_weight_bytes_per_token"]
        matrices = sum(f["bytes_per_token"] for f in by_format)
        if not 0.99 * weights <= matrices < weights:
            fail(f"the matrices' {matrices} bytes are not the step's {weights} less an embedding row")
        read = weights / (j["read_bandwidth_gbps"] * 1e9)
        want = {"decode_no_overlap_fraction": read / (read + compute),
                "decode_overlap_fraction": read / max(read, compute)}
        for key, value in want.items():
            if abs(j.get(key, -1) - value) > 1e-9:
                fail(f"{key} {j.get(key)}, want {value}")
        if "decode compute alone" not in table:
            fail("table has no decode compute line")
        runs = j["prefill_runs_s"]
        if len(runs) != 3 or min(runs) <= 0:
            fail(f"prefill_runs_s should hold 3 positive times, got {runs}")
        if j["prefill_s"] != statistics.median(runs):
            fail(f"prefill_s {j['prefill_s']} is not the median of {runs}")
        if j["prefill_first_call_s"] <= 0:
            fail("prefill_first_call_s should be positive")
        if len(j["generated_tokens"]) != 4:
            fail(f"expected 4 generated tokens, got {j['generated_tokens']}")
        prefill_row = [r for r in j["rows"] if r["metric"] == "prefill" and r["unit"] == "tok/s"][0]
        if abs(prefill_row["value"] - 40 / j["prefill_s"]) > 1e-6 * prefill_row["value"]:
            fail(f"prefill tok/s {prefill_row['value']} is not 40 / prefill_s")

        # Repeated prefills write the same K/V, so decode is the same greedy run;
        # --json makes the directories it names (cli/json_file.h).
        _, j2 = bench(model, os.path.join(tmp, "new", "dir", "b.json"))
        if j2["generated_tokens"] != j["generated_tokens"]:
            fail(f"greedy decode differs between runs: {j['generated_tokens']} vs {j2['generated_tokens']}")

        # --kv-dtype: the KV the prefill and decode run on, named in the table and JSON.
        table, j3 = bench(model, os.path.join(tmp, "c.json"), ["--kv-dtype", "int8"])
        if j3["kv_dtype"] != "int8" or "int8 KV" not in table:
            fail(f"--kv-dtype int8 not reported: {j3.get('kv_dtype')!r}")
        if len(j3["generated_tokens"]) != 4:
            fail(f"int8 KV: expected 4 generated tokens, got {j3['generated_tokens']}")
        p = run(["bench", "model", "--model", model, "--kv-dtype", "q3"])
        if p.returncode == 0 or "--kv-dtype" not in p.stderr + p.stdout:
            fail(f"--kv-dtype q3 should be refused naming the flag: {p.stdout} {p.stderr}")

        # A --json that cannot be written fails the command, naming the flag.
        p = run(["bench", "model", "--model", model, "--prompt-tokens", "8", "--decode-tokens", "1",
                 "--prefill-runs", "1", "--json", "/proc/kvfork-no-such/out.json"])
        if p.returncode == 0 or "--json /proc/kvfork-no-such/out.json" not in p.stderr:
            fail(f"an unwritable --json should fail naming it: {p.stdout[-500:]} {p.stderr[-500:]}")

        p = run(["bench", "model", "--model", model, "--prefill-runs", "0"])
        if p.returncode == 0 or "--prefill-runs" not in p.stderr + p.stdout:
            fail(f"--prefill-runs 0 should be refused naming the flag: {p.stdout} {p.stderr}")
    print("ok")


if __name__ == "__main__":
    main()
