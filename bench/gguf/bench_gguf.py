"""`make bench-gguf`: kvfork and llama.cpp on the same GGUF files, alternated
in rounds within one run (issue 22, section 5).

For each shape (random bf16 weights in a real shape, `kvfork make-model`, exported
to BF16 GGUF by `kvfork export-gguf` and quantized by llama.cpp's own
`llama-quantize`) and each format, every round runs
  kvfork bench model --model FILE.gguf --prompt-tokens 512 --decode-tokens 128
and then
  llama-bench -m FILE.gguf -p 512 -n 128 -t THREADS -r 1 -o json
so both engines see the same minutes of this VM's memory bandwidth. Prints a
table per round and the medians, and writes bench/results/gguf.json.
kvfork's row also carries its decode limit (read bandwidth measured in the
same run / bytes of quantized weights read per token) and its fraction.

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
import statistics
import subprocess
import sys
import tempfile

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.path.join(SRC, ".cache")
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(SRC, "build/release/src/cli/kvfork"))
LLAMA_BIN = os.environ.get("LLAMA_BIN_DIR", os.path.join(CACHE, "llama-server/build/bin"))
TOKENIZERS = {"qwen3": "tokenizer-qwen3", "llama": "tokenizer-llama3", "qwen3_moe": "tokenizer-qwen3"}
# shape -> (architecture, make-model flags). The MoE is Qwen3-30B-A3B's shape
# proportionally shrunk (issue 24, section 4: its 61 GB of bf16 do not fit
# beside a build): 8 of its 48 layers and 16 of its 128 experts, 8 per
# token as the real one, so each token reads half of a layer's experts.
SHAPES = {"qwen3-0.6b": ("qwen3", ["--shape", "qwen3-0.6b"]),
          "llama-3.2-1b": ("llama", ["--shape", "llama-3.2-1b"]),
          "qwen3-30b-a3b-e16-l8": ("qwen3_moe", ["--shape", "qwen3-30b-a3b", "--experts", "16",
                                                  "--layers", "8"])}


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
    arch, flags = SHAPES[shape]
    bf16 = os.path.join(work, f"{shape}-BF16.gguf")
    if not os.path.exists(bf16):
        model = os.path.join(work, shape)
        tok = os.path.join(CACHE, "npm", TOKENIZERS[arch], "package", "models")
        if not os.path.exists(os.path.join(model, "config.json")):
            subprocess.run([KVFORK, "make-model", "--arch", arch, "--seed", "1",
                            "--dtype", "bf16", "--tokenizer", tok, "--out", model] + flags,
                           check=True)
        subprocess.run([KVFORK, "export-gguf", "--model", model, "--out", bf16, "--dtype", "bf16"],
                       check=True)
    out = os.path.join(work, f"{shape}-{fmt}.gguf")
    if not os.path.exists(out):
        subprocess.run([os.path.join(LLAMA_BIN, "llama-quantize"), bf16, out, fmt], check=True,
                       capture_output=True)
    return out


def run_kvfork(path, threads, tmp):
    js = os.path.join(tmp, "kvfork.json")
    subprocess.run([KVFORK, "bench", "model", "--model", path, "--threads", str(threads),
                    "--prompt-tokens", "512", "--decode-tokens", "128", "--prefill-runs", "1",
                    "--json", js], check=True, capture_output=True)
    j = json.load(open(js))
    rows = {(r["metric"], r["unit"]): r for r in j["rows"]}
    d = rows[("decode", "tok/s")]
    return {"pp512": rows[("prefill", "tok/s")]["value"], "tg128": d["value"],
            "decode_limit": d["limit"], "decode_fraction": d["fraction"],
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


def run_llama(path, threads, preload):
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = preload
    p = subprocess.run([os.path.join(LLAMA_BIN, "llama-bench"), "-m", path, "-p", "512", "-n",
                        "128", "-t", str(threads), "-r", "1", "-o", "json"], check=True,
                       capture_output=True, text=True, env=env)
    out = {}
    for t in json.loads(p.stdout):
        key = "pp512" if t["n_prompt"] > 0 else "tg128"
        out[key] = t["avg_ts"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qwen3-0.6b,llama-3.2-1b")
    ap.add_argument("--formats", default="Q8_0,Q4_K_M,BF16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(CACHE, "bench-gguf"),
                    help="where the model files are made and kept between runs")
    ap.add_argument("--json", default=os.path.join(SRC, "bench/results/gguf.json"))
    a = ap.parse_args()
    for tool in ["llama-bench", "llama-quantize"]:
        if not os.access(os.path.join(LLAMA_BIN, tool), os.X_OK):
            sys.exit(f"{LLAMA_BIN}/{tool} is not built: run scripts/setup-llama-tools.sh")
    os.makedirs(a.work, exist_ok=True)
    preload = no_amx_preload(a.work) if cpu_has_amx() else None
    llama_mode = ("AMX buffers off (no_amx_preload.c), repacked AVX-512 kernels" if preload
                  else "default")
    results = []
    print(f"machine: {cpu_name()}, {a.threads} threads; llama.cpp: {llama_mode}")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in a.shapes.split(","):
            for fmt in a.formats.split(","):
                path = make_file(shape, fmt, a.work)
                rounds = []
                for r in range(a.rounds):
                    k = run_kvfork(path, a.threads, tmp)
                    l = run_llama(path, a.threads, preload)
                    rounds.append({"kvfork": k, "llama.cpp": l})
                    print(f"{shape:13} {fmt:7} round {r + 1}: kvfork pp512 {k['pp512']:7.1f} "
                          f"tg128 {k['tg128']:6.1f} ({100 * k['decode_fraction']:.0f}% of "
                          f"{k['decode_limit']:.1f}) | llama.cpp pp512 {l['pp512']:7.1f} "
                          f"tg128 {l['tg128']:6.1f}", flush=True)
                med = lambda eng, key: statistics.median(x[eng][key] for x in rounds)
                row = {"shape": shape, "format": fmt, "rounds": rounds,
                       "median": {e: {k: med(e, k) for k in ("pp512", "tg128")}
                                  for e in ("kvfork", "llama.cpp")}}
                m = row["median"]
                row["decode_ratio"] = m["kvfork"]["tg128"] / m["llama.cpp"]["tg128"]
                row["prefill_ratio"] = m["kvfork"]["pp512"] / m["llama.cpp"]["pp512"]
                row["decode_fraction_median"] = statistics.median(
                    x["kvfork"]["decode_fraction"] for x in rounds)
                results.append(row)
    print(f"\n{'shape':13} {'format':7} {'kvfork pp512':>12} {'llama pp512':>12} {'ratio':>6} "
          f"{'kvfork tg128':>12} {'llama tg128':>12} {'ratio':>6} {'of limit':>8}")
    for row in results:
        m = row["median"]
        print(f"{row['shape']:13} {row['format']:7} {m['kvfork']['pp512']:12.1f} "
              f"{m['llama.cpp']['pp512']:12.1f} {row['prefill_ratio']:6.2f} "
              f"{m['kvfork']['tg128']:12.1f} {m['llama.cpp']['tg128']:12.1f} "
              f"{row['decode_ratio']:6.2f} {100 * row['decode_fraction_median']:7.0f}%")
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    json.dump({"machine": cpu_name(), "threads": a.threads, "rounds": a.rounds,
               "llama_cpp_mode": llama_mode,
               "results": results}, open(a.json, "w"), indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
