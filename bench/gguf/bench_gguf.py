"""`make bench-gguf`: kvfork and llama.cpp on the same GGUF files, alternated
in rounds within one run (issue 22, section 5).

For each shape (random bf16 weights in a real shape, `kvfork make-model`, exported
to BF16 GGUF by `kvfork export-gguf` and quantized by llama.cpp's own
`llama-quantize`) and each format, every round runs
  kvfork bench model --model FILE.gguf --prompt-tokens P --decode-tokens D
and then
  llama-bench -m FILE.gguf -p P -n D -t THREADS -r 1 -o json
(P = --prompt-tokens, 512, and D = --decode-tokens, 128, by default)
so both engines see the same minutes of this VM's memory bandwidth. Prints a
table per round and the medians, and writes bench/results/gguf.json. SHAPES
has one shape per architecture kvfork runs (some cut in layers, which the
JSON's "cut" says); an engine that refuses or fails on a file is reported
with its error and the other engine's numbers are kept.
kvfork's row also carries its decode limit (read bandwidth measured in the
same run / bytes of quantized weights read per token) and its fraction, and
the fraction its compute allows if streaming the weights and computing on
them do not overlap ("bound": 1 / (read + compute), the matrices' compute
timed with the weights in L2; see `kvfork bench model`).

On a CPU with AMX, llama-bench runs with no_amx_preload.c preloaded: ggml's
AMX weight buffers die with SIGILL on the Sapphire Rapids VM, and llama-bench
has no -nr (no repack) option, so the preload makes ggml's request for the
AMX tile state fail; llama.cpp then runs its AVX-512 kernels, with its
repacked weight layouts (the JSON says which way it ran).
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.path.join(SRC, ".cache")
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(SRC, "build/release/src/cli/kvfork"))
LLAMA_BIN = os.environ.get("LLAMA_BIN_DIR", os.path.join(CACHE, "llama-server/build/bin"))
# shape -> (architecture, tokenizer, make-model flags, what differs from the
# released model). The tokenizer is one the cache holds whose vocabulary fits
# the shape's (make-model pads the rest); the benchmark feeds random ids, so
# its pieces do not matter, only the vocabulary size (the lm_head's rows).
# Shapes cut in layers keep every dimension of a layer and the vocabulary:
# their full files would not fit beside a build (mistral-7b: 14 GB bf16) or
# take minutes per round on a shared 2-core VM.
# The MoE is Qwen3-30B-A3B's shape proportionally shrunk (issue 24, section
# 4: its 61 GB of bf16 do not fit beside a build): 8 of its 48 layers and 16
# of its 128 experts, 8 per token as the real one, so each token reads half
# of a layer's experts.
SHAPES = {
    "qwen3-0.6b": ("qwen3", "tokenizer-qwen3", ["--shape", "qwen3-0.6b"], ""),
    "llama-3.2-1b": ("llama", "tokenizer-llama3", ["--shape", "llama-3.2-1b"], ""),
    "qwen2.5-0.5b": ("qwen2", "tokenizer-qwen3", ["--shape", "qwen2.5-0.5b"], ""),
    "gemma-3-1b": ("gemma3", "tokenizer-qwen3", ["--shape", "gemma-3-1b"], ""),
    "smollm3-3b-l12": ("smollm3", "tokenizer-llama3", ["--shape", "smollm3-3b", "--layers", "12"],
                       "12 of 36 layers"),
    "phi-4-mini-l8": ("phi3", "tokenizer-qwen3", ["--shape", "phi-4-mini", "--layers", "8"],
                      "8 of 32 layers"),
    # Mistral-7B's 32000-token vocabulary is smaller than either cached
    # tokenizer's; 128256 is the Llama 3 tokenizer's (Ministral's is 131072).
    "mistral-7b-l4": ("mistral", "tokenizer-llama3",
                      ["--shape", "mistral-7b", "--layers", "4", "--vocab-size", "128256"],
                      "4 of 32 layers, vocab 128256 (not 32000)"),
    "qwen3-30b-a3b-e16-l8": ("qwen3_moe", "tokenizer-qwen3",
                             ["--shape", "qwen3-30b-a3b", "--experts", "16", "--layers", "8"],
                             "8 of 48 layers, 16 of 128 experts (8 per token)"),
}


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def make_file(shape, fmt, work):
    """The shape's GGUF in `fmt`: the random bf16 weights exported as BF16
    (exact: the weights are bf16), quantized from it by llama-quantize."""
    arch, tokenizer, flags, _ = SHAPES[shape]
    out = os.path.join(work, f"{shape}-{fmt}.gguf")
    if os.path.exists(out):
        return out  # the BF16 file it came from may be gone: only disk
    bf16 = os.path.join(work, f"{shape}-BF16.gguf")
    if not os.path.exists(bf16):
        model = os.path.join(work, shape)
        tok = os.path.join(CACHE, "npm", tokenizer, "package", "models")
        if not os.path.exists(os.path.join(model, "config.json")):
            subprocess.run([KVFORK, "make-model", "--arch", arch, "--seed", "1",
                            "--dtype", "bf16", "--tokenizer", tok, "--out", model] + flags,
                           check=True)
        subprocess.run([KVFORK, "export-gguf", "--model", model, "--out", bf16 + ".tmp",
                        "--dtype", "bf16"], check=True)
        os.replace(bf16 + ".tmp", bf16)
        # The BF16 GGUF holds the same weights: the directory only costs disk.
        shutil.rmtree(model)
    subprocess.run([os.path.join(LLAMA_BIN, "llama-quantize"), bf16, out + ".tmp", fmt],
                   check=True, capture_output=True)
    os.replace(out + ".tmp", out)
    return out


def failure(e):
    """What a benchmark run that failed said: its exit and last stderr line."""
    err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    lines = err.strip().splitlines()
    return f"exit {e.returncode}: {lines[-1] if lines else '(no stderr)'}"


def run_kvfork(path, threads, tmp, pp, tg):
    js = os.path.join(tmp, "kvfork.json")
    subprocess.run([KVFORK, "bench", "model", "--model", path, "--threads", str(threads),
                    "--prompt-tokens", str(pp), "--decode-tokens", str(tg), "--prefill-runs", "1",
                    "--json", js], check=True, capture_output=True)
    j = json.load(open(js))
    rows = {(r["metric"], r["unit"]): r for r in j["rows"]}
    d = rows[("decode", "tok/s")]
    return {f"pp{pp}": rows[("prefill", "tok/s")]["value"], f"tg{tg}": d["value"],
            "decode_limit": d["limit"], "decode_fraction": d["fraction"],
            "decode_no_overlap_fraction": j["decode_no_overlap_fraction"],
            "read_bandwidth_gbps": j["read_bandwidth_gbps"]}


def cpu_has_amx():
    try:
        return any(line.startswith("flags") and " amx_tile" in line for line in open("/proc/cpuinfo"))
    except OSError:
        return False


def no_amx_preload(work):
    """The preload library (module docstring), built into the work folder."""
    lib = os.path.join(work, "no_amx_preload.so")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no_amx_preload.c")
    if not os.path.exists(lib) or os.path.getmtime(lib) < os.path.getmtime(src):
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, src, "-ldl"], check=True)
    return lib


def run_llama(path, threads, preload, pp, tg):
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = preload
    p = subprocess.run([os.path.join(LLAMA_BIN, "llama-bench"), "-m", path, "-p", str(pp), "-n",
                        str(tg), "-t", str(threads), "-r", "1", "-o", "json"], check=True,
                       capture_output=True, text=True, env=env)
    out = {}
    for t in json.loads(p.stdout):
        key = f"pp{pp}" if t["n_prompt"] > 0 else f"tg{tg}"
        out[key] = t["avg_ts"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qwen3-0.6b,llama-3.2-1b",
                    help="comma-separated names of SHAPES, or all")
    ap.add_argument("--formats", default="Q8_0,Q4_K_M,BF16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512, help="prompt tokens of the prefill (pp)")
    ap.add_argument("--decode-tokens", type=int, default=128, help="decode tokens (tg)")
    ap.add_argument("--work", default=os.path.join(CACHE, "bench-gguf"),
                    help="where the model files are made and kept between runs")
    ap.add_argument("--json", default=os.path.join(SRC, "bench/results/gguf.json"))
    a = ap.parse_args()
    for tool in ["llama-bench", "llama-quantize"]:
        if not os.access(os.path.join(LLAMA_BIN, tool), os.X_OK):
            sys.exit(f"{LLAMA_BIN}/{tool} is not built: run scripts/setup-llama-tools.sh")
    shapes = list(SHAPES) if a.shapes == "all" else a.shapes.split(",")
    for shape in shapes:
        if shape not in SHAPES:
            sys.exit(f"--shapes: unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    os.makedirs(a.work, exist_ok=True)
    preload = no_amx_preload(a.work) if cpu_has_amx() else None
    llama_mode = ("AMX buffers off (no_amx_preload.c), repacked AVX-512 kernels" if preload
                  else "default")
    pp, tg = a.prompt_tokens, a.decode_tokens
    PP, TG = f"pp{pp}", f"tg{tg}"
    results = []
    print(f"machine: {cpu_name()}, {a.threads} threads; llama.cpp: {llama_mode}")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            for fmt in a.formats.split(","):
                path = make_file(shape, fmt, a.work)
                rounds = []
                errors = {}
                for r in range(a.rounds):
                    res = {}
                    for engine, run in (
                            ("kvfork", lambda: run_kvfork(path, a.threads, tmp, pp, tg)),
                            ("llama.cpp", lambda: run_llama(path, a.threads, preload, pp, tg))):
                        if engine in errors:
                            continue
                        try:
                            res[engine] = run()
                        except subprocess.CalledProcessError as e:
                            errors[engine] = failure(e)
                            print(f"{shape} {fmt}: {engine} failed: {errors[engine]}", flush=True)
                    rounds.append(res)
                    k, l = res.get("kvfork"), res.get("llama.cpp")
                    kv = (f"kvfork {PP} {k[PP]:7.1f} {TG} {k[TG]:6.1f} "
                          f"({100 * k['decode_fraction']:.0f}% of {k['decode_limit']:.1f}, "
                          f"bound {100 * k['decode_no_overlap_fraction']:.0f}%)"
                          if k else "kvfork failed")
                    ll = (f"llama.cpp {PP} {l[PP]:7.1f} {TG} {l[TG]:6.1f}" if l
                          else "llama.cpp failed")
                    print(f"{shape:20} {fmt:7} round {r + 1}: {kv} | {ll}", flush=True)
                row = {"shape": shape, "architecture": SHAPES[shape][0], "cut": SHAPES[shape][3],
                       "format": fmt, "rounds": rounds, "errors": errors, "median": {}}
                for e in ("kvfork", "llama.cpp"):
                    got = [x[e] for x in rounds if e in x]
                    if got:
                        row["median"][e] = {key: statistics.median(g[key] for g in got)
                                            for key in (PP, TG)}
                m = row["median"]
                if len(m) == 2:
                    row["decode_ratio"] = m["kvfork"][TG] / m["llama.cpp"][TG]
                    row["prefill_ratio"] = m["kvfork"][PP] / m["llama.cpp"][PP]
                if "kvfork" in m:
                    for key in ("decode_fraction", "decode_no_overlap_fraction"):
                        row[key + "_median"] = statistics.median(
                            x["kvfork"][key] for x in rounds if "kvfork" in x)
                results.append(row)
    print(f"\n{'shape':20} {'format':7} {'kvfork ' + PP:>12} {'llama ' + PP:>12} {'ratio':>6} "
          f"{'kvfork ' + TG:>12} {'llama ' + TG:>12} {'ratio':>6} {'of limit':>8} {'bound':>6}")
    cell = lambda row, e, key: (f"{row['median'][e][key]:12.1f}" if e in row["median"]
                                else f"{'failed':>12}")
    ratio = lambda row, key: f"{row[key]:6.2f}" if key in row else f"{'-':>6}"
    for row in results:
        frac = row.get("decode_fraction_median")
        bound = row.get("decode_no_overlap_fraction_median")
        print(f"{row['shape']:20} {row['format']:7} {cell(row, 'kvfork', PP)} "
              f"{cell(row, 'llama.cpp', PP)} {ratio(row, 'prefill_ratio')} "
              f"{cell(row, 'kvfork', TG)} {cell(row, 'llama.cpp', TG)} "
              f"{ratio(row, 'decode_ratio')} "
              f"{(f'{100 * frac:7.0f}%') if frac is not None else '-':>8} "
              f"{(f'{100 * bound:5.0f}%') if bound is not None else '-':>6}")
        for e, msg in row["errors"].items():
            print(f"  {e} failed: {msg}")
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    json.dump({"machine": cpu_name(), "threads": a.threads, "rounds": a.rounds,
               "prompt_tokens": pp, "decode_tokens": tg,
               "llama_cpp_mode": llama_mode,
               "results": results}, open(a.json, "w"), indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
