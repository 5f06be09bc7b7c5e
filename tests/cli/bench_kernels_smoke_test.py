"""Smoke test of `kvfork bench kernels --quick`: every GEMV/GEMM row for both
weight dtypes and every attention case (bf16, int8, q4 and q4r KV) is printed and
written to the JSON with positive times and rates, `--attention-only` runs
the attention rows alone, and a bad flag is refused naming it. (The numbers
themselves are the benchmark's business, never a test's.)"""

import json
import os
import subprocess
import sys
import tempfile

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))

ATTENTION_CASES = ["prefill 512", "prefill 2048", "22 after 3400", "prefill 2048 i8",
                   "22 after 3400 i8", "prefill 2048 q4", "22 after 3400 q4", "decode at 512",
                   "decode at 2048", "decode 2048 i8", "decode 2048 q4", "decode 2048 q4r"]
# The KV format a row's name ends with (bf16 where none).
ROW_DTYPES = {"i8": "int8", "q4": "q4", "q4r": "q4r"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "kernels.json")
        p = subprocess.run([KVFORK, "bench", "kernels", "--threads", "2", "--quick", "--json", out],
                           capture_output=True, text=True, timeout=600)
        print(p.stdout[-4000:], p.stderr[-2000:])
        if p.returncode != 0:
            fail(f"bench kernels exited {p.returncode}")
        j = json.load(open(out))
        for field in ["isa", "threads", "read_bandwidth_gbps", "peak_f32_gflops", "matmul", "attention"]:
            if field not in j:
                fail(f"JSON has no field {field!r}")
        ops = {(r["op"], r["dtype"]) for r in j["matmul"]}
        for want in [("gemv", "bf16"), ("gemm", "bf16"), ("gemv", "f32"), ("gemm", "f32")]:
            if want not in ops:
                fail(f"no {want} rows in {sorted(ops)}")
        for r in j["matmul"]:
            if not (r["ours_ms"] > 0 and r["rate"] > 0 and r["fraction_of_limit"] > 0):
                fail(f"matmul row without positive time and rate: {r}")
        qops = {(r["op"], r["dtype"]) for r in j.get("quantized_matmul", [])}
        for dtype in ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"]:
            for op in ["gemv", "gemm"]:
                if (op, dtype) not in qops:
                    fail(f"no quantized {op} {dtype} rows in {sorted(qops)}")
        if ("gemv", "bf16") not in qops or ("gemm", "bf16") in qops:
            fail(f"want bf16 GEMV rows (the baseline) and no bf16 GEMM rows: {sorted(qops)}")
        for r in j["quantized_matmul"]:
            if not (r["ours_ms"] > 0 and r["rate"] > 0):
                fail(f"quantized row without positive time and rate: {r}")
            if r["op"] == "gemv":
                # The compute bound: W in L2 on one core, and the fraction of
                # the limit if streaming and compute added up, 1/(1 + bw/hot).
                if not (r["hot_rate"] > 0 and 0 < r["no_overlap_fraction"] < 1):
                    fail(f"GEMV row without its in-cache rate and no-overlap bound: {r}")
        cases = [r["case"] for r in j["attention"]]
        if cases != ATTENTION_CASES:
            fail(f"attention cases {cases}, want {ATTENTION_CASES}")
        for r in j["attention"]:
            if not (r["ms"] > 0 and r["cpu_ms_per_thread"] > 0 and r["rate"] > 0
                    and r["fraction_of_limit"] > 0):
                fail(f"attention row without positive time and rate: {r}")
            want_dtype = ROW_DTYPES.get(r["case"].rsplit(" ", 1)[-1], "bf16")
            if r["kv_dtype"] != want_dtype:
                fail(f"attention row {r['case']} on {r['kv_dtype']} KV, want {want_dtype}")
            want_unit = "GB/s of KV" if r["query_tokens"] == 1 else "GFLOP/s"
            if r["rate_unit"] != want_unit:
                fail(f"attention row {r['case']} in {r['rate_unit']}, want {want_unit}")
            if not any(line.startswith(r["case"]) for line in p.stdout.splitlines()):
                fail(f"table has no row {r['case']!r}")

        # --attention-only: the limits and the attention rows, no MatMul rows.
        p = subprocess.run([KVFORK, "bench", "kernels", "--threads", "2", "--quick",
                            "--attention-only", "--json", out],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            fail(f"bench kernels --attention-only exited {p.returncode}: {p.stderr[-2000:]}")
        j = json.load(open(out))
        if j["matmul"] or "quantized_matmul" in j:
            fail("--attention-only still ran MatMul rows")
        if [r["case"] for r in j["attention"]] != ATTENTION_CASES:
            fail(f"--attention-only attention cases {[r['case'] for r in j['attention']]}")

        p = subprocess.run([KVFORK, "bench", "kernels", "--threads", "0"], capture_output=True,
                           text=True, timeout=60)
        if p.returncode == 0 or "--threads" not in p.stderr + p.stdout:
            fail(f"--threads 0 should be refused naming the flag: {p.stdout} {p.stderr}")
    print("ok")


if __name__ == "__main__":
    main()
