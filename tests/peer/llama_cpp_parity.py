"""Peer tier: kvfork and llama.cpp on the same GGUF file (issue 22, section 4).

For each architecture (qwen3, llama; qwen2, smollm3, phi3 as ARCH:SHAPE, or
their real shapes with --real-shapes) a random-weight model of a real shape is
made (`kvfork make-model`), exported to f32 GGUF (`kvfork export-gguf`), and
quantized by llama.cpp's own `llama-quantize` to every format kvfork reads.
On each file both servers run the same prompt (token ids), greedy:
  - the 32 generated tokens must be identical;
  - `kvfork perplexity` and `llama-perplexity` on the same text (this
    repository's docs, --ctx 128, 4 chunks) agree within 0.1%;
  - at each step, the log-probabilities of llama.cpp's top-5 tokens (pre-
    sampling, `n_probs`) must agree with kvfork's (`logprobs`, the same ids via
    `return_tokens_as_token_ids`) within the format's tolerance below.
Both engines keep the KV cache in f32 here (llama.cpp's default is f16,
kvfork's bf16) and llama.cpp runs without flash attention (its CPU flash
attention rounds through f16), so what is compared is the weights' arithmetic.
Log-probabilities are logits minus a shared log-sum-exp, so an absolute
bound on them is a bound on the logit differences after centring.

Needs llama.cpp's `llama-server` and `llama-quantize` (built by
scripts/setup-llama-tools.sh, minutes on 2 cores, so not in `make test`):
`make test-peer`. Prints a table and writes JSON (--json).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.path.join(SRC, ".cache")
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(SRC, "build/release/src/cli/kvfork"))
LLAMA_BIN = os.environ.get("LLAMA_BIN_DIR", os.path.join(CACHE, "llama-server/build/bin"))
TOKENIZERS = {"qwen3": "tokenizer-qwen3", "qwen2": "tokenizer-qwen3", "llama": "tokenizer-llama3",
              "smollm3": "tokenizer-llama3", "phi3": "tokenizer-llama3"}
# Each family's real shape (issue 24), for --archs ARCH:SHAPE or --real-shapes.
REAL_SHAPES = {"qwen2": "qwen2.5-0.5b", "smollm3": "smollm3-3b", "phi3": "phi-4-mini"}
# llama-quantize type -> tolerance on |logprob difference| (nats). f32/bf16
# differ only by kvfork's bf16 activation rounding; the quantized formats add
# each engine's int8 activation rounding (both quantize activations to q8, but
# kvfork's per-row kernels and llama.cpp's differ in summation order).
FORMATS = {"F32": 2e-2, "BF16": 2e-2, "Q8_0": 3e-2, "Q4_0": 5e-2, "Q4_1": 5e-2, "Q5_0": 5e-2,
           "Q5_1": 5e-2, "Q4_K_S": 5e-2, "Q4_K_M": 5e-2, "Q5_K_M": 5e-2, "Q6_K": 5e-2}
PROMPT = "The cache is shared block by block between every request that begins with"
STEPS = 32


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def wait_ready(url, proc, what):
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not become ready")


class Server:
    def __init__(self, argv, what):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(argv + ["--port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_ready(self.url, self.proc, what)

    def close(self):
        self.proc.kill()
        self.proc.wait()


def llama_run(gguf, ids, threads):
    s = Server([os.path.join(LLAMA_BIN, "llama-server"), "-m", gguf, "-t", str(threads), "-c",
                "512", "-np", "1", "--host", "127.0.0.1", "-ctk", "f32", "-ctv", "f32", "-fa", "off"],
               "llama-server")
    try:
        r = post(s.url + "/completion",
                 {"prompt": ids, "n_predict": STEPS, "n_probs": 5, "samplers": ["top_k"],
                  "top_k": 1, "ignore_eos": True, "cache_prompt": False,
                  "post_sampling_probs": False})
        steps = r["completion_probabilities"]
        return ([p["id"] for p in steps],
                [{t["id"]: t["logprob"] for t in p["top_logprobs"]} for p in steps])
    finally:
        s.close()


def kvfork_run(gguf, ids, threads):
    s = Server([KVFORK, "serve", "--model", gguf, "--threads", str(threads), "--kv-dtype", "f32"],
               "kvfork serve")
    try:
        r = post(s.url + "/v1/completions",
                 {"prompt": ids, "max_tokens": STEPS, "temperature": 0, "logprobs": 5,
                  "ignore_eos": True, "return_tokens_as_token_ids": True})
        lp = r["choices"][0]["logprobs"]
        toks = [int(t.split(":")[1]) for t in lp["tokens"]]
        tops = [{int(k.split(":")[1]): v for k, v in t.items()} for t in lp["top_logprobs"]]
        return toks, tops
    finally:
        s.close()


PPL_CTX, PPL_CHUNKS = 128, 4


def perplexities(gguf, text, threads):
    k = subprocess.run([KVFORK, "perplexity", "--model", gguf, "--file", text, "--ctx",
                        str(PPL_CTX), "--chunks", str(PPL_CHUNKS), "--threads", str(threads),
                        "--kv-dtype", "f32"],
                       capture_output=True, text=True, check=True)
    l = subprocess.run([os.path.join(LLAMA_BIN, "llama-perplexity"), "-m", gguf, "-f", text, "-c",
                        str(PPL_CTX), "--chunks", str(PPL_CHUNKS), "-t", str(threads), "-ctk",
                        "f32", "-ctv", "f32", "-fa", "off"],
                       capture_output=True, text=True, check=True)

    def final(out):
        for line in out.splitlines():
            if "Final estimate: PPL = " in line:
                return float(line.split("PPL = ")[1].split()[0])
        raise RuntimeError("no final estimate in: " + out[-500:])

    return final(k.stdout), final(l.stdout + l.stderr)


def tokenize(model_dir):
    p = subprocess.run([KVFORK, "tokenize", "--model", model_dir, "--ids", "--add-special",
                        PROMPT], capture_output=True, text=True, check=True)
    return [int(x) for x in p.stdout.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default="qwen3,llama",
                    help="comma list of ARCH or ARCH:SHAPE (the shape defaults to --shape)")
    ap.add_argument("--real-shapes", action="store_true",
                    help="add qwen2:qwen2.5-0.5b, smollm3:smollm3-3b and phi3:phi-4-mini")
    ap.add_argument("--shape", default="default-50m",
                    help="make-model shape: rows a multiple of 256, as the K formats need")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=os.path.join(SRC, "build/release/peer/llama_cpp_parity.json"))
    a = ap.parse_args()
    for tool in ["llama-server", "llama-quantize", "llama-perplexity"]:
        if not os.access(os.path.join(LLAMA_BIN, tool), os.X_OK):
            print(f"FAIL: {LLAMA_BIN}/{tool} is not built: run scripts/setup-llama-tools.sh")
            return 1
    rows, failures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        with open(text, "w", encoding="utf-8") as out:
            # Documents joined by the end-of-text strings of both tokenizers,
            # as training corpora are: llama-perplexity tokenizes them as
            # text (no special-token parsing), and kvfork perplexity must too.
            docs = [open(os.path.join(SRC, "docs", name), encoding="utf-8").read()
                    for name in sorted(os.listdir(os.path.join(SRC, "docs")))
                    if name.endswith(".md")]
            out.write("\n<|endoftext|><|end_of_text|>\n".join(docs))
        items = a.archs.split(",")
        if a.real_shapes:
            items += [f"{k}:{v}" for k, v in REAL_SHAPES.items()]
        for item in items:
            arch, _, shape = item.partition(":")
            shape = shape or a.shape
            model = os.path.join(tmp, arch)
            tok = os.path.join(CACHE, "npm", TOKENIZERS[arch], "package", "models")
            subprocess.run([KVFORK, "make-model", "--arch", arch, "--shape", shape, "--seed",
                            "11", "--dtype", "bf16", "--tokenizer", tok, "--out", model],
                           check=True, capture_output=True)
            f32 = os.path.join(tmp, arch + "-f32.gguf")
            # The tokenizer's own pre-tokenizer name (phi3's default, gpt-4o,
            # is Phi-4-mini's o200k, not the Llama 3 tokenizer used here).
            pre = "qwen2" if TOKENIZERS[arch] == "tokenizer-qwen3" else "llama-bpe"
            subprocess.run([KVFORK, "export-gguf", "--model", model, "--out", f32, "--dtype",
                            "f32", "--tokenizer-pre", pre], check=True, capture_output=True)
            ids = tokenize(model)
            for fmt in a.formats.split(","):
                gguf = f32 if fmt == "F32" else os.path.join(tmp, f"{arch}-{fmt}.gguf")
                if fmt != "F32":
                    subprocess.run([os.path.join(LLAMA_BIN, "llama-quantize"), f32, gguf, fmt],
                                   check=True, capture_output=True)
                l_toks, l_tops = llama_run(gguf, ids, a.threads)
                k_toks, k_tops = kvfork_run(gguf, ids, a.threads)
                same = next((i for i, (x, y) in enumerate(zip(l_toks, k_toks)) if x != y), None)
                worst = 0.0
                for i in range(min(len(l_tops), len(k_tops)) if same is None else same):
                    for tid, lpv in l_tops[i].items():
                        if tid in k_tops[i]:
                            worst = max(worst, abs(k_tops[i][tid] - lpv))
                        else:
                            # Not in kvfork's top 5 (a near-tie at rank 5):
                            # it must not beat kvfork's 5th by more than tol.
                            worst = max(worst, lpv - min(k_tops[i].values()))
                k_ppl, l_ppl = perplexities(gguf, text, a.threads)
                ppl_diff = abs(k_ppl - l_ppl) / l_ppl
                ok = (same is None and len(k_toks) == STEPS and worst <= FORMATS[fmt] and
                      ppl_diff <= 1e-3)
                rows.append({"arch": arch, "shape": shape, "format": fmt, "greedy_identical": same is None,
                             "first_divergence": same, "max_logprob_diff": worst,
                             "tolerance": FORMATS[fmt], "kvfork_ppl": k_ppl,
                             "llama_ppl": l_ppl, "ppl_rel_diff": ppl_diff, "ok": ok})
                print(f"{arch:6} {fmt:7} greedy {'same' if same is None else 'differs at ' + str(same):16}"
                      f" max |dlogprob| {worst:.2e} (tol {FORMATS[fmt]:.0e})"
                      f" ppl {k_ppl:.4g} vs {l_ppl:.4g} ({100 * ppl_diff:.3f}%)"
                      f" {'ok' if ok else 'FAIL'}", flush=True)
                if not ok:
                    failures.append(f"{arch} {fmt}")
                if fmt != "F32":
                    os.remove(gguf)
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    json.dump({"shape": a.shape, "threads": a.threads, "rows": rows}, open(a.json, "w"), indent=2)
    if failures:
        print("FAIL: " + ", ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
