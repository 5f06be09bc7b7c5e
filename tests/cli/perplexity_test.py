"""`kvfork perplexity` against the engine's own prompt logprobs, an independent
path to the same numbers: a tiny model served by `kvfork serve` scores each
chunk's second half with `echo` + `logprobs` (max_tokens 0), and
exp(mean NLL) of those must equal the command's PPL, chunk by chunk. Also:
the BOS is put at every chunk's start for a tokenizer that adds one (Llama 3),
a text shorter than two contexts is refused with a message naming it, and
special-token strings in the text are scored as text.
llama.cpp's `llama-perplexity` on the same file is compared in the peer tier
(tests/peer)."""

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.environ.get("KVFORK_CACHE_DIR", os.path.join(SRC, ".cache"))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))
TOKENIZERS = {"qwen3": "tokenizer-qwen3", "llama": "tokenizer-llama3"}
CTX = 32


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(args, timeout=300):
    return subprocess.run([KVFORK] + args, capture_output=True, text=True, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def served_ppl(model, chunks, bos):
    """PPL of the chunks from the server's prompt logprobs."""
    port = free_port()
    proc = subprocess.Popen([KVFORK, "serve", "--model", model, "--port", str(port),
                             "--threads", "2"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        nll, count, per_chunk = 0.0, 0, []
        for chunk in chunks:
            ids = list(chunk)
            if bos is not None:
                ids[0] = bos
            r = post(url + "/v1/completions",
                     {"prompt": ids, "echo": True, "logprobs": 0, "max_tokens": 0,
                      "add_special_tokens": False})
            lp = r["choices"][0]["logprobs"]["token_logprobs"]
            if len(lp) != CTX:
                fail(f"server returned {len(lp)} prompt logprobs for {CTX} tokens")
            for i in range(CTX // 2 + 1, CTX):
                nll -= lp[i]
                count += 1
            per_chunk.append(math.exp(nll / count))
        return per_chunk
    finally:
        proc.kill()
        proc.wait()


def check(arch, tmp, text_path):
    tok_dir = os.path.join(CACHE, "npm", TOKENIZERS[arch], "package", "models")
    model = os.path.join(tmp, arch)
    p = run(["make-model", "--arch", arch, "--shape", "tiny", "--seed", "5", "--tokenizer",
             tok_dir, "--out", model])
    if p.returncode != 0:
        fail(f"make-model {arch}: {p.stderr[-2000:]}")
    out = os.path.join(tmp, arch + ".json")
    p = run(["perplexity", "--model", model, "--file", text_path, "--ctx", str(CTX),
             "--chunks", "3", "--threads", "2", "--json", out])
    if p.returncode != 0:
        fail(f"perplexity {arch} exited {p.returncode}: {p.stderr[-2000:]}")
    print(p.stdout.strip())
    j = json.load(open(out))
    if j["chunks"] != 3 or j["scored"] != 3 * (CTX - CTX // 2 - 1):
        fail(f"{arch}: chunks {j['chunks']} scored {j['scored']}")
    if "Final estimate: PPL = " not in p.stdout:
        fail(f"{arch}: no final estimate line")
    if j["bos"] != (arch == "llama"):
        fail(f"{arch}: bos {j['bos']}: Llama 3 adds one, Qwen3 does not")

    # The same tokens as the command: the served tokenizer on the same text.
    tok = subprocess.run([KVFORK, "tokenize", "--model", model, "--ids", "--add-special", "-"],
                         stdin=open(text_path, "rb"), capture_output=True, timeout=300)
    if tok.returncode != 0:
        fail(f"tokenize: {tok.stderr[-1000:]}")
    ids = [int(x) for x in tok.stdout.split()]
    if len(ids) != j["tokens"]:
        fail(f"{arch}: tokenize gives {len(ids)} tokens, perplexity counted {j['tokens']}")
    chunks = [ids[k * CTX:(k + 1) * CTX] for k in range(3)]
    bos = ids[0] if j["bos"] else None
    want = served_ppl(model, chunks, bos)
    for k, (a, b) in enumerate(zip(j["chunk_ppl"], want)):
        if abs(a - b) > 1e-4 * b:
            fail(f"{arch}: chunk {k + 1}: perplexity {a} but the server's logprobs give {b}")
    print(f"{arch}: chunk perplexities {j['chunk_ppl']} match the server's {want}")


def check_special_strings_are_text(tmp):
    """A special token's string in the text is text, as llama-perplexity reads
    it (parse_special off): a corpus that separates documents with
    "<|endoftext|>" scores those characters, not Qwen3's end-of-text id. So
    the command counts more tokens than `kvfork tokenize`, which parses them
    as the special token: one more per piece the string splits into, at
    least one per occurrence."""
    text = "".join(f"Document {k}: the same words again and again.\n<|endoftext|>\n"
                   for k in range(40))
    path = os.path.join(tmp, "documents.txt")
    open(path, "w", encoding="utf-8").write(text)
    model = os.path.join(tmp, "qwen3")
    out = os.path.join(tmp, "documents.json")
    p = run(["perplexity", "--model", model, "--file", path, "--ctx", str(CTX), "--chunks", "2",
             "--threads", "2", "--json", out])
    if p.returncode != 0:
        fail(f"perplexity on documents exited {p.returncode}: {p.stderr[-2000:]}")
    tok = subprocess.run([KVFORK, "tokenize", "--model", model, "--ids", "-"],
                         stdin=open(path, "rb"), capture_output=True, timeout=300)
    if tok.returncode != 0:
        fail(f"tokenize: {tok.stderr[-1000:]}")
    parsed = len(tok.stdout.split())
    counted = json.load(open(out))["tokens"]
    if counted < parsed + 40:
        fail(f"perplexity counted {counted} tokens, tokenize (special strings as special "
             f"tokens) {parsed}: the 40 \"<|endoftext|>\" strings were not read as text")
    print(f"special strings as text: {counted} tokens against {parsed} parsed as special")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        text_path = os.path.join(tmp, "text.txt")
        with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
            open(text_path, "w", encoding="utf-8").write(f.read())
        for arch in ["qwen3", "llama"]:
            check(arch, tmp, text_path)
        check_special_strings_are_text(tmp)
        short = os.path.join(tmp, "short.txt")
        open(short, "w").write("too short")
        p = run(["perplexity", "--model", os.path.join(tmp, "qwen3"), "--file", short,
                 "--ctx", str(CTX)])
        if p.returncode == 0 or "needs at least" not in p.stderr or short not in p.stderr:
            fail(f"a short text should be refused naming it: {p.stderr[-500:]}")
    print("PASS")


if __name__ == "__main__":
    main()
