"""`kvfork kv-quality --kv-dtype kivi4|kivi2`, the KIVI quality simulation
(K per channel over --kivi-group-tokens tokens, V per token, the newest
incomplete group in bf16, stored dequantized in bf16), on the trained model
(head_dim 64):
- --kivi-keys token (the ablation, K per token as V) gives other logits;
- a group as long as the chunk quantizes nothing: the logits are bitwise
  the bf16 run's (the residual is bf16 and running a chunk group by group
  changes no bits);
- kivi4 against itself: KL exactly 0;
- kivi4 against bf16 with groups of 8 tokens: different logits, a small
  positive mean KL; kivi2 (2 bits) is further from bf16 than kivi4, and
  groups of 16 give other numbers than groups of 8;
- the JSON records the group and says it is a simulation; --help says it
  saves no memory;
- refusals: a model whose head_dim is not a multiple of 32 (tiny random
  Qwen3, head_dim 16), --kivi-group-tokens 0, and an unknown --kv-dtype
  whose message names kivi4."""

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
MODEL = os.path.join(SRC, "models/trained/bible-fortune-4m")
TEXT = os.path.join(SRC, "tests/data/trained_model/heldout_sample.txt")


def run(args, timeout=300):
    return subprocess.run([KVFORK] + args, capture_output=True, text=True, timeout=timeout)


def kv_quality(base, tested, group, prefix, extra=()):
    out = prefix + ".json"
    p = run(["kv-quality", "--model", MODEL, "--file", TEXT, "--ctx", str(CTX), "--chunks", str(CHUNKS),
             "--threads", "2", "--base-kv-dtype", base, "--kv-dtype", tested, "--kivi-group-tokens",
             str(group), "--json", out, "--dump-logits", prefix] + list(extra))
    if p.returncode != 0:
        fail(f"kv-quality {base} vs {tested} (group {group}) exited {p.returncode}: {p.stderr[-2000:]}")
    with open(out) as f:
        j = json.load(f)
    b = np.fromfile(prefix + ".base.f32", dtype=np.float32)
    t = np.fromfile(prefix + ".tested.f32", dtype=np.float32)
    print(f"{tested} vs {base}, group {group}: mean KL {j['kl_mean']:.3g}, top-1 {j['top1_agreement']:.2%}")
    return j, b, t


def main():
    with tempfile.TemporaryDirectory() as tmp:
        j, b, t = kv_quality("bf16", "kivi4", CTX, os.path.join(tmp, "whole"))
        if not np.array_equal(b, t) or j["kl_max"] != 0:
            fail(f"kivi4 with one group per chunk: logits differ from bf16 (max KL {j['kl_max']})")

        j, b, t = kv_quality("kivi4", "kivi4", 8, os.path.join(tmp, "self"))
        if not np.array_equal(b, t) or j["kl_max"] != 0 or j["top1_agreement"] != 1.0:
            fail(f"kivi4 against kivi4: not identical (max KL {j['kl_max']})")

        k4, b4, t4 = kv_quality("bf16", "kivi4", 8, os.path.join(tmp, "k4"))
        if np.array_equal(b4, t4) or not 0 < k4["kl_mean"] < 0.05:
            fail(f"kivi4 group 8 against bf16: mean KL {k4['kl_mean']}, expected small and positive")
        if k4.get("kivi_group_tokens") != 8 or "quality only" not in k4.get("kivi_note", ""):
            fail(f"kivi4 JSON: kivi_group_tokens {k4.get('kivi_group_tokens')}, note {k4.get('kivi_note')!r}")
        k2, _, t2 = kv_quality("bf16", "kivi2", 8, os.path.join(tmp, "k2"))
        if not k2["kl_mean"] > 2 * k4["kl_mean"]:
            fail(f"kivi2 mean KL {k2['kl_mean']} not clearly above kivi4's {k4['kl_mean']}")
        k16, _, t16 = kv_quality("bf16", "kivi4", 16, os.path.join(tmp, "k16"))
        if np.array_equal(t16, t4):
            fail("kivi4 with groups of 16 and of 8 gave the same logits")
        kt, _, tt = kv_quality("bf16", "kivi4", 8, os.path.join(tmp, "ktok"), ["--kivi-keys", "token"])
        if np.array_equal(tt, t4) or kt.get("kivi_keys") != "token":
            fail(f"--kivi-keys token: same logits as per channel, or JSON kivi_keys {kt.get('kivi_keys')!r}")

        p = run(["kv-quality", "--help"])
        if p.returncode != 0 or "kivi4" not in p.stdout or "no memory saved" not in p.stdout \
                or "--kivi-group-tokens" not in p.stdout:
            fail(f"kv-quality --help does not describe the kivi simulation:\n{p.stdout}")

        tiny = os.path.join(tmp, "tiny")
        p = run(["make-model", "--arch", "qwen3", "--shape", "tiny", "--seed", "3", "--tokenizer",
                 QWEN_TOKENIZER, "--out", tiny])
        if p.returncode != 0:
            fail(f"make-model: {p.stderr[-2000:]}")
        for model, extra, want in (
                (tiny, ["--kv-dtype", "kivi4"], "head_dim 16"),
                (MODEL, ["--kv-dtype", "kivi4", "--kivi-group-tokens", "0"], "--kivi-group-tokens"),
                (MODEL, ["--kv-dtype", "kivi3"], "kivi4"),
                (MODEL, ["--kv-dtype", "kivi4", "--kivi-keys", "row"], "--kivi-keys")):
            p = run(["kv-quality", "--model", model, "--file", TEXT, "--ctx", str(CTX)] + extra)
            if p.returncode == 0 or want not in p.stderr:
                fail(f"{extra}: exit {p.returncode}, want an error naming {want!r}: {p.stderr[-500:]}")
    print("PASS")


if __name__ == "__main__":
    main()
