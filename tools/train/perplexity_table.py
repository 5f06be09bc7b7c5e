"""Held-out perplexity of a model in every weight format and KV format, kvfork beside
llama.cpp's llama-perplexity on the same GGUF files; prints a Markdown table, writes JSON.

  perplexity_table.py --model models/trained/bible-fortune-4m \
      --text build/train/corpus/heldout.txt --ctx 256 --chunks 100 \
      --llama-bin .cache/llama-server/build/bin --work build/train/ppl

GGUF files: `kvfork export-gguf --dtype bf16` and `kvfork quantize --type T` (the bytes
llama-quantize writes, docs/quantize.md). KV formats: kvfork f32 / bf16 / int8; llama.cpp
f32 (the like-for-like comparison, -fa off as the peer tier runs it), f16 (its default)
and q8_0 (-fa on, which a quantized V cache needs).
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

WEIGHT_TYPES = ["q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_1", "q5_0", "q4_k_m", "q4_k_s", "q4_1", "q4_0"]
KVFORK_KV = ["f32", "bf16", "int8"]
LLAMA_KV = [("f32", ["-ctk", "f32", "-ctv", "f32", "-fa", "off"]),
            ("f16", ["-ctk", "f16", "-ctv", "f16", "-fa", "off"]),
            ("q8_0", ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"])]


def final_ppl(out):
    for line in out.splitlines():
        if "Final estimate: PPL = " in line:
            return float(line.split("PPL = ")[1].split()[0])
    raise RuntimeError("no final estimate in: " + out[-800:])


def run(cmd):
    # Output to a file, not a pipe: llama.cpp logs from a worker thread, and
    # through a pipe its last lines (the final estimate) were seen to be lost.
    t0 = time.time()
    with tempfile.TemporaryFile(mode="w+") as out:
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        out.seek(0)
        text = out.read()
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{text[-2000:]}")
    return text, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face directory (bf16 safetensors)")
    ap.add_argument("--text", required=True)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=-1, help="-1: the whole text")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kvfork", default="build/release/src/cli/kvfork")
    ap.add_argument("--llama-bin", default="", help="directory of llama-perplexity; empty: skip")
    ap.add_argument("--work", default="build/train/ppl", help="GGUF files and JSON go here")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    name = os.path.basename(os.path.normpath(args.model))

    files = [("bf16 (safetensors dir)", args.model)]
    bf16 = os.path.join(args.work, f"{name}-bf16.gguf")
    run([args.kvfork, "export-gguf", "--model", args.model, "--dtype", "bf16", "--out", bf16])
    files.append(("bf16 GGUF", bf16))
    for t in WEIGHT_TYPES:
        path = os.path.join(args.work, f"{name}-{t}.gguf")
        run([args.kvfork, "quantize", "--model", args.model, "--type", t, "--out", path,
             "--threads", str(args.threads)])
        files.append((t.upper(), path))

    common = ["--ctx", str(args.ctx), "--chunks", str(args.chunks), "--threads", str(args.threads)]
    # Numbers already measured with the same ctx/chunks are reused (a later run with
    # --llama-bin only adds llama.cpp's columns).
    cache_path = os.path.join(args.work, "perplexity.json")
    done = {}
    if os.path.exists(cache_path):
        with open(cache_path) as f:
            old = json.load(f)
        if (old["ctx"], old["chunks"], old["text"]) == (args.ctx, args.chunks, args.text):
            done = {r["weights"]: r for r in old["rows"]}
    rows = []
    for label, path in files:
        row = {"weights": label, "file": path,
               "bytes": (os.path.getsize(path) if path.endswith(".gguf") else
                         os.path.getsize(os.path.join(path, "model.safetensors")))}
        row.update({k: v for k, v in done.get(label, {}).items() if k.startswith(("kvfork_", "llama_"))})
        for kv in KVFORK_KV:
            if f"kvfork_{kv}" in row:
                continue
            out, sec = run([args.kvfork, "perplexity", "--model", path, "--file", args.text,
                            "--kv-dtype", kv] + common)
            row[f"kvfork_{kv}"] = final_ppl(out)
        if args.llama_bin and path.endswith(".gguf"):
            for kv, flags in LLAMA_KV:
                if f"llama_{kv}" in row:
                    continue
                cmd = [os.path.join(args.llama_bin, "llama-perplexity"), "-m", path,
                       "-f", args.text, "-c", str(args.ctx), "--chunks",
                       str(args.chunks), "-t", str(args.threads),
                       # No weight repacking: its AMX path dies with SIGILL on
                       # the Sapphire Rapids VMs, and plain rows are the layout
                       # kvfork reads.
                       "-nr"] + flags
                out, sec = run(cmd)
                # llama.cpp logs from a worker thread that exit can cut short
                # (seen both through a pipe and to a file): run again, at most twice.
                for _ in range(2):
                    if "Final estimate: PPL = " in out:
                        break
                    out, sec = run(cmd)
                row[f"llama_{kv}"] = final_ppl(out)
        rows.append(row)
        print(json.dumps(row), flush=True)

    with open(cache_path, "w") as f:
        json.dump({"model": args.model, "text": args.text, "ctx": args.ctx,
                   "chunks": args.chunks, "rows": rows}, f, indent=1)

    def fmt(row, key):
        return f"{row[key]:.4f}" if key in row else "—"

    print("\n| weights | size (KiB) | kvfork KV f32 | llama.cpp KV f32 | diff | kvfork KV bf16 "
          "| kvfork KV int8 | llama.cpp KV f16 | llama.cpp KV q8_0 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        diff = "—"
        if "llama_f32" in r:
            diff = f"{(r['kvfork_f32'] / r['llama_f32'] - 1) * 100:+.3f}%"
        print(f"| {r['weights']} | {r['bytes'] / 1024:.0f} | {fmt(r, 'kvfork_f32')} | "
              f"{fmt(r, 'llama_f32')} | {diff} | {fmt(r, 'kvfork_bf16')} | {fmt(r, 'kvfork_int8')} | "
              f"{fmt(r, 'llama_f16')} | {fmt(r, 'llama_q8_0')} |")


if __name__ == "__main__":
    main()
