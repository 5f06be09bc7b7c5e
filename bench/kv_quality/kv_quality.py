#!/usr/bin/env python3
"""What each quantized KV cache format costs in model quality, kvfork beside
llama.cpp on the same model file, text and context (issue 26).

  /usr/bin/python3 bench/kv_quality/kv_quality.py                # the trained model, held-out text
  /usr/bin/python3 bench/kv_quality/kv_quality.py --kvfork-kv int8,q4

The model is exported once to a bf16 GGUF (`kvfork export-gguf`), which both
engines read. The text is cut into chunks of --ctx tokens and the second half
of each chunk is scored, as llama-perplexity does; at every scored position
the next-token distribution with the tested KV format is compared with the one
with the base format: mean KL(base || tested), its median, p99 and max, top-1
agreement and both perplexities.

- kvfork: `kvfork kv-quality --base-kv-dtype bf16 --kv-dtype X` runs both in
  one process from full f32 logits.
  `--kvfork-kv kivi4,kivi2` adds kv-quality's KIVI simulation (K per channel,
  V per token, the newest incomplete group in bf16; stored dequantized, a
  quality study, not a KV format), with --kivi-group-tokens and --kivi-keys.
- llama.cpp: `llama-perplexity --kl-divergence-base FILE` saves the base run's
  log-probabilities (f16 KV), then `--kl-divergence` with `-ctk X -ctv X`
  compares against them. llama.cpp stores them as 16-bit integers per row, so
  its f16-against-f16 row is not 0: it is that storage's noise floor. Its
  quantized V cache needs flash attention, so every llama.cpp run has
  `-fa on`, and `-nr` (no weight repacking: the repacked AMX path dies with
  SIGILL on the Sapphire Rapids VM). Since April 2026 llama.cpp rotates K and V
  by a Hadamard transform when the KV type is quantized and head_dim % 64 == 0;
  the `q4_0 (no rotation)` row sets LLAMA_ATTN_ROT_DISABLE=1.

Prints one Markdown table and writes JSON (--out).
"""

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# llama.cpp's tested KV types: (row name, -ctk/-ctv type, extra environment).
LLAMA_KV = {
    "f16": ("f16", {}),
    "q8_0": ("q8_0", {}),
    "q4_0": ("q4_0", {}),
    "q4_0-norot": ("q4_0", {"LLAMA_ATTN_ROT_DISABLE": "1"}),
}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/trained/bible-fortune-4m"),
                    help="Hugging Face model directory (default: the trained model, models/trained/bible-fortune-4m)")
    ap.add_argument("--text", default=os.path.join(ROOT, "tests/data/trained_model/heldout_sample.txt"),
                    help="the text to score (default: the trained model's held-out sample)")
    ap.add_argument("--ctx", type=int, default=256,
                    help="tokens per chunk (default 256: the trained model's training window)")
    ap.add_argument("--chunks", type=int, default=-1, help="chunks to score; -1 = all (default)")
    ap.add_argument("--threads", type=int, default=2, help="compute threads of both engines (default 2)")
    ap.add_argument("--kvfork", default=os.path.join(ROOT, "build/release/src/cli/kvfork"),
                    help="the kvfork binary (default build/release/src/cli/kvfork)")
    ap.add_argument("--kvfork-base", default="bf16", help="kvfork's base KV format (default bf16)")
    ap.add_argument("--kvfork-kv", default="f32,int8,q4,q4r",
                    help="comma-separated kvfork KV formats to test (default f32,int8,q4,q4r: f32 "
                         "shows what bf16's own rounding costs)")
    ap.add_argument("--kivi-group-tokens", type=int, default=16,
                    help="kivi4/kivi2 rows (kv-quality's KIVI simulation, quality only): tokens per K "
                         "channel group (default 16)")
    ap.add_argument("--kivi-keys", default="channel", choices=["channel", "token"],
                    help="kivi4/kivi2 rows: K per channel (KIVI, default) or per token (an ablation)")
    ap.add_argument("--llama-bin", default=os.path.join(ROOT, ".cache/llama-server/build/bin"),
                    help="directory holding llama-perplexity (default .cache/llama-server/build/bin, "
                         "scripts/setup-llama-tools.sh builds it); llama.cpp is skipped when it is missing")
    ap.add_argument("--llama-kv", default=",".join(LLAMA_KV),
                    help="comma-separated llama.cpp rows against its f16 base (default: all of "
                         + ", ".join(LLAMA_KV) + ")")
    ap.add_argument("--work", default="", help="GGUF and llama.cpp's logits file go here "
                    "(default: a temporary directory)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/kv_quality.json"),
                    help="the JSON (default bench/results/kv_quality.json)")
    a = ap.parse_args(argv)
    a.kvfork_kv = [x for x in a.kvfork_kv.split(",") if x]
    a.llama_kv = [x for x in a.llama_kv.split(",") if x]
    for x in a.llama_kv:
        if x not in LLAMA_KV:
            ap.error(f"--llama-kv: unknown row {x!r} (known: {', '.join(LLAMA_KV)})")
    if a.ctx < 8 or a.threads < 1:
        ap.error("--ctx must be >= 8 and --threads >= 1")
    return a


def run(cmd, env=None):
    """(output, seconds). Output goes to a file, not a pipe: llama.cpp logs from
    a worker thread, and through a pipe its last lines were seen to be lost."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as out:
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, **(env or {})))
        out.seek(0)
        text = out.read()
    if r.returncode != 0:
        raise SystemExit(f"kv_quality: {shlex.join(cmd)} exited {r.returncode}:\n{text[-3000:]}")
    return text, time.monotonic() - t0


def kvfork_rows(a, gguf, work):
    rows = []
    for dtype in a.kvfork_kv:
        out_json = os.path.join(work, f"kvfork-{dtype}.json")
        cmd = [a.kvfork, "kv-quality", "--model", gguf, "--file", a.text, "--ctx", str(a.ctx),
               "--chunks", str(a.chunks), "--threads", str(a.threads), "--base-kv-dtype", a.kvfork_base,
               "--kv-dtype", dtype, "--json", out_json]
        label = dtype
        if dtype.startswith("kivi"):
            cmd += ["--kivi-group-tokens", str(a.kivi_group_tokens), "--kivi-keys", a.kivi_keys]
            label = f"{dtype} (simulated; K per {a.kivi_keys}, groups of {a.kivi_group_tokens} tokens)"
        _, sec = run(cmd)
        with open(out_json) as f:
            j = json.load(f)
        rows.append({"engine": "kvfork", "base": a.kvfork_base, "kv": label, "positions": j["positions"],
                     "ppl_base": j["ppl_base"], "ppl_tested": j["ppl_tested"], "kl_mean": j["kl_mean"],
                     "kl_mean_stderr": j["kl_mean_stderr"], "kl_median": j["kl_median"], "kl_p99": j["kl_p99"],
                     "kl_max": j["kl_max"], "top1_agreement": j["top1_agreement"], "seconds": sec,
                     "command": shlex.join(cmd)})
        print(f"kv_quality: kvfork {dtype}: mean KL {j['kl_mean']:.3g}, top-1 {j['top1_agreement']:.2%} "
              f"({sec:.0f} s)", flush=True)
    return rows


def number(pattern, text, what):
    m = re.search(pattern, text, re.M)
    if not m:
        raise SystemExit(f"kv_quality: no {what} in llama-perplexity's output:\n{text[-3000:]}")
    return float(m.group(1))


def parse_llama(text):
    """The statistics llama-perplexity --kl-divergence prints."""
    f = r"(-?[0-9.]+(?:e[-+]?\d+)?)"
    return {
        "ppl_tested": number(r"^Mean PPL\(Q\)\s*:\s*" + f, text, "Mean PPL(Q)"),
        "ppl_base": number(r"^Mean PPL\(base\)\s*:\s*" + f, text, "Mean PPL(base)"),
        "kl_mean": number(r"^Mean\s+KLD:\s*" + f, text, "Mean KLD"),
        "kl_mean_stderr": number(r"^Mean\s+KLD:\s*[-0-9.e+]+\s*±\s*" + f, text, "Mean KLD's uncertainty"),
        "kl_median": number(r"^Median\s+KLD:\s*" + f, text, "Median KLD"),
        "kl_p99": number(r"^99\.0%\s+KLD:\s*" + f, text, "99.0% KLD"),
        "kl_max": number(r"^Maximum KLD:\s*" + f, text, "Maximum KLD"),
        "top1_agreement": number(r"^Same top p:\s*" + f, text, "Same top p") / 100.0,
    }


def llama_run(cmd, env, what, expect):
    """Runs llama-perplexity until `expect` appears (its last lines can be cut
    off at exit: at most three tries)."""
    for _ in range(3):
        out, sec = run(cmd, env)
        if expect in out:
            return out, sec
    raise SystemExit(f"kv_quality: {what}: no {expect!r} in three runs:\n{out[-3000:]}")


def llama_rows(a, gguf, work):
    perplexity = os.path.join(a.llama_bin, "llama-perplexity")
    # -lv 4: libllama's info lines too, among them whether the KV cache rotates (attn_rot_k).
    common = [perplexity, "-m", gguf, "-c", str(a.ctx), "-t", str(a.threads), "-nr", "-fa", "on", "-lv", "4"]
    base_file = os.path.join(work, "llama-f16.kld")
    base_cmd = common + ["-f", a.text, "--chunks", str(a.chunks), "-ctk", "f16", "-ctv", "f16",
                         "--kl-divergence-base", base_file]
    llama_run(base_cmd, None, "llama.cpp f16 base", "Final estimate: PPL = ")
    rows = []
    for name in a.llama_kv:
        kv, env = LLAMA_KV[name]
        cmd = common + ["-ctk", kv, "-ctv", kv, "--kl-divergence-base", base_file, "--kl-divergence"]
        out, sec = llama_run(cmd, env, f"llama.cpp {name}", "Same top p:")
        row = {"engine": "llama.cpp", "base": "f16", "kv": name, "seconds": sec,
               "command": " ".join(f"{k}={v}" for k, v in env.items()) + (" " if env else "") + shlex.join(cmd)}
        row.update(parse_llama(out))
        rot = re.search(r"attn_rot_k = (\d)", out)
        row["hadamard_rotation"] = bool(int(rot.group(1))) if rot else None
        rows.append(row)
        print(f"kv_quality: llama.cpp {name}: mean KL {row['kl_mean']:.3g}, top-1 "
              f"{row['top1_agreement']:.2%} ({sec:.0f} s)", flush=True)
    return rows, shlex.join(base_cmd)


def table(rows):
    out = ["| engine | KV against base | PPL base | PPL tested (change) | mean KL ± stderr | median KL | "
           "p99 KL | max KL | top-1 agreement |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        change = (r["ppl_tested"] / r["ppl_base"] - 1) * 100
        out.append(f"| {r['engine']} | {r['kv']} vs {r['base']} | {r['ppl_base']:.4f} | "
                   f"{r['ppl_tested']:.4f} ({change:+.3f}%) | {r['kl_mean']:.3g} ± {r['kl_mean_stderr']:.1g} | "
                   f"{r['kl_median']:.3g} | {r['kl_p99']:.3g} | {r['kl_max']:.3g} | "
                   f"{100 * r['top1_agreement']:.2f}% |")
    return "\n".join(out)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_rev(path):
    p = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def main(argv):
    a = parse_args(argv)
    if not os.access(a.kvfork, os.X_OK):
        raise SystemExit(f"kv_quality: no kvfork binary at {a.kvfork} (run `make build`)")
    have_llama = os.access(os.path.join(a.llama_bin, "llama-perplexity"), os.X_OK)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        gguf = os.path.join(work, os.path.basename(os.path.normpath(a.model)) + "-bf16.gguf")
        run([a.kvfork, "export-gguf", "--model", a.model, "--dtype", "bf16", "--out", gguf])
        rows = kvfork_rows(a, gguf, work)
        notes = []
        llama_base_cmd = None
        if have_llama and a.llama_kv:
            llama, llama_base_cmd = llama_rows(a, gguf, work)
            rows += llama
        elif a.llama_kv:
            notes.append(f"llama.cpp skipped: no llama-perplexity in {a.llama_bin} "
                         "(scripts/setup-llama-tools.sh builds it)")
    positions = rows[0]["positions"] if rows and "positions" in rows[0] else None
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join(["bench/kv_quality/kv_quality.py"] + argv),
        "model": os.path.relpath(a.model, ROOT), "text": os.path.relpath(a.text, ROOT),
        "ctx": a.ctx, "chunks": a.chunks, "threads": a.threads, "positions": positions,
        "cpu": cpu_name(), "cores": os.cpu_count(),
        "load_avg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "kvfork_commit": git_rev(ROOT),
        "llama_commit": git_rev(os.path.join(ROOT, ".cache/llama.cpp")) if have_llama else None,
        "llama_base_command": llama_base_cmd, "notes": notes, "seconds": time.monotonic() - t0,
    }
    md = table(rows)
    print()
    print(f"{meta['model']} (GGUF bf16), {meta['text']}, ctx {a.ctx}, {positions} scored positions")
    print(md)
    for n in notes:
        print("note: " + n)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "rows": rows, "table": md}, f, indent=1)
    print(f"kv_quality: wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
