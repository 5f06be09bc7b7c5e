"""`kvfork kv-quality` on a tiny random Qwen3 model:
- f32 against f32: KL exactly 0 at every position, top-1 agreement exactly
  100%, equal perplexities;
- bf16 against f32: a small positive KL; every number of the JSON (mean KL
  and its standard error, median, p99, max, top-1 agreement, both
  perplexities) equals a recomputation in float64 numpy from the two runs'
  logits (--dump-logits), written out the plain way over the whole
  [positions, vocab] arrays;
- each perplexity equals `kvfork perplexity --kv-dtype` of that format on
  the same file, another command's run of the model;
- a KV format it does not know is refused naming the flag."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvfork_test_env import KVFORK, QWEN_TOKENIZER, SRC, fail  # noqa: E402

CTX = 32
CHUNKS = 4


def run(args, timeout=300):
    return subprocess.run([KVFORK] + args, capture_output=True, text=True, timeout=timeout)


def kv_quality(model, text, base, tested, out_prefix):
    out = out_prefix + ".json"
    p = run(["kv-quality", "--model", model, "--file", text, "--ctx", str(CTX), "--chunks", str(CHUNKS),
             "--threads", "2", "--base-kv-dtype", base, "--kv-dtype", tested, "--json", out,
             "--dump-logits", out_prefix])
    if p.returncode != 0:
        fail(f"kv-quality {base} vs {tested} exited {p.returncode}: {p.stderr[-2000:]}")
    print(p.stdout.strip())
    for want in ("| mean KL(base || tested) |", "| top-1 agreement |", "| p99 KL |"):
        if want not in p.stdout:
            fail(f"kv-quality {base} vs {tested}: no {want!r} row in the table")
    with open(out) as f:
        j = json.load(f)
    base_logits = np.fromfile(out_prefix + ".base.f32", dtype=np.float32)
    tested_logits = np.fromfile(out_prefix + ".tested.f32", dtype=np.float32)
    nxt = np.fromfile(out_prefix + ".next.i32", dtype=np.int32)
    positions = CHUNKS * (CTX - CTX // 2 - 1)
    if j["positions"] != positions or len(nxt) != positions:
        fail(f"{positions} positions expected: JSON {j['positions']}, dump {len(nxt)}")
    vocab = base_logits.size // positions
    if base_logits.size != positions * vocab or tested_logits.size != base_logits.size:
        fail(f"dumped logits: {base_logits.size} and {tested_logits.size} floats for {positions} rows")
    return j, base_logits.reshape(positions, vocab), tested_logits.reshape(positions, vocab), nxt


def recompute(base, tested, nxt):
    """The statistics from the two runs' logits, in float64 numpy."""
    def log_softmax(x):
        x = x.astype(np.float64)
        m = x.max(axis=1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))

    lb, lt = log_softmax(base), log_softmax(tested)
    kl = (np.exp(lb) * (lb - lt)).sum(axis=1)
    rows = np.arange(len(nxt))
    return {
        "kl": kl,
        "kl_mean": kl.mean(),
        "kl_mean_stderr": kl.std() / np.sqrt(len(kl) - 1) if kl.std() > 0 else 0.0,
        "kl_median": np.percentile(kl, 50),
        "kl_p99": np.percentile(kl, 99),
        "kl_max": kl.max(),
        "top1_agreement": float((base.argmax(axis=1) == tested.argmax(axis=1)).mean()),
        "ppl_base": float(np.exp(-lb[rows, nxt].mean())),
        "ppl_tested": float(np.exp(-lt[rows, nxt].mean())),
    }


def close(a, b, rel, abs_tol=0.0):
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_tol)


def perplexity_of(model, text, dtype, tmp):
    out = os.path.join(tmp, f"ppl-{dtype}.json")
    p = run(["perplexity", "--model", model, "--file", text, "--ctx", str(CTX), "--chunks", str(CHUNKS),
             "--threads", "2", "--kv-dtype", dtype, "--json", out])
    if p.returncode != 0:
        fail(f"perplexity --kv-dtype {dtype} exited {p.returncode}: {p.stderr[-2000:]}")
    with open(out) as f:
        return json.load(f)["ppl"]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "qwen3")
        p = run(["make-model", "--arch", "qwen3", "--shape", "tiny", "--seed", "11", "--tokenizer",
                 QWEN_TOKENIZER, "--out", model])
        if p.returncode != 0:
            fail(f"make-model: {p.stderr[-2000:]}")
        text = os.path.join(SRC, "tests/data/trained_model/heldout_sample.txt")

        # The same format on both sides: the runs are bitwise equal.
        j, base, tested, nxt = kv_quality(model, text, "f32", "f32", os.path.join(tmp, "same"))
        if not np.array_equal(base, tested):
            fail("f32 against f32: the two runs' logits differ")
        if j["kl_mean"] != 0 or j["kl_max"] != 0 or j["kl_p99"] != 0:
            fail(f"f32 against f32: KL mean {j['kl_mean']}, p99 {j['kl_p99']}, max {j['kl_max']}, not 0")
        if j["top1_agreement"] != 1.0 or j["top1_same"] != j["positions"]:
            fail(f"f32 against f32: top-1 agreement {j['top1_agreement']}")
        if j["ppl_base"] != j["ppl_tested"]:
            fail(f"f32 against f32: perplexities {j['ppl_base']} and {j['ppl_tested']}")

        # bf16 KV against f32 KV: rounding only, a small positive KL.
        j, base, tested, nxt = kv_quality(model, text, "f32", "bf16", os.path.join(tmp, "bf16"))
        want = recompute(base, tested, nxt)
        if np.array_equal(base, tested):
            fail("bf16 against f32: the logits are identical, bf16 KV did not round anything")
        if not 0 < j["kl_mean"] < 1e-2 or (want["kl"] < -1e-12).any():
            fail(f"bf16 against f32: mean KL {j['kl_mean']}, expected small and positive")
        for key in ("kl_mean", "kl_mean_stderr", "kl_median", "kl_p99", "kl_max"):
            if not close(j[key], want[key], 1e-6, 1e-15):
                fail(f"bf16 against f32: {key} {j[key]} but numpy gives {want[key]}")
        if j["top1_agreement"] != want["top1_agreement"]:
            fail(f"bf16 against f32: top-1 agreement {j['top1_agreement']}, numpy {want['top1_agreement']}")
        for key in ("ppl_base", "ppl_tested"):
            # The command uses llama-perplexity's arithmetic (max and the
            # difference to it in f32): float rounding apart.
            if not close(j[key], want[key], 1e-5):
                fail(f"bf16 against f32: {key} {j[key]} but numpy gives {want[key]}")
        print(f"bf16 against f32: mean KL {j['kl_mean']:.3g} (numpy {want['kl_mean']:.3g}), top-1 "
              f"{j['top1_agreement']:.2%}, p99 {j['kl_p99']:.3g}, max {j['kl_max']:.3g}")

        # Each run's perplexity is `kvfork perplexity`'s for that format.
        for key, dtype in (("ppl_base", "f32"), ("ppl_tested", "bf16")):
            ppl = perplexity_of(model, text, dtype, tmp)
            if not close(j[key], ppl, 1e-12):
                fail(f"{key}: kv-quality {j[key]}, kvfork perplexity --kv-dtype {dtype} {ppl}")

        for extra, flag in ((["--kv-dtype", "q9"], "--kv-dtype"),
                            (["--kv-dtype", "int8", "--base-kv-dtype", "q9"], "--base-kv-dtype")):
            p = run(["kv-quality", "--model", model, "--file", text] + extra)
            if p.returncode == 0 or f"{flag}: " not in p.stderr or "'q9'" not in p.stderr:
                fail(f"{flag} q9: exit {p.returncode}, want an error naming {flag}: {p.stderr[-500:]}")
    print("PASS")


if __name__ == "__main__":
    main()
