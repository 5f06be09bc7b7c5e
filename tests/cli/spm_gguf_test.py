"""GGUF models with a SentencePiece vocabulary (tokenizer.ggml.model "llama",
tokenizer/spm_tokenizer.h) load and serve with the tokenizer from their own
metadata:
  - a Gemma 3 model (make-model --arch gemma3, 32000-token vocabulary) exported
    with the tokenizer keys of llama.cpp's Llama 2 vocab file;
  - a Phi-3 model (phi3-tiny, 32064 tokens) with those of llama.cpp's Phi-3
    vocab file and general.name "Phi3", which brings its chat template and
    the rstrip llama.cpp gives Phi-3's special tokens.
On each, `kvfork serve` answers /tokenize, /v1/completions and (Phi-3)
/v1/chat/completions with the template from tokenizer.chat_template. Where
llama.cpp's llama-server is built (scripts/setup-llama-tools.sh), the ids of
/tokenize (add_special, special tokens parsed) must be llama-server's on the
same file for llama.cpp's test inputs, random multilingual text and chat
strings; without it that comparison is skipped and said so."""

import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvfork_test_env import CACHE, KVFORK, fail, free_port, http  # noqa: E402

MODELS = os.path.join(CACHE, "llama.cpp/models")
LLAMA_SERVER = os.path.join(os.environ.get("LLAMA_BIN_DIR", os.path.join(CACHE, "llama-server/build/bin")),
                            "llama-server")


def run(args):
    p = subprocess.run([KVFORK] + args, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        fail(f"{' '.join(args)} exited {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}")


def serve(argv, what):
    port = free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv + ["--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(1200):
        if proc.poll() is not None:
            log.seek(0)
            fail(f"{what} exited {proc.returncode}: {log.read().decode()[-2000:]}")
        try:
            status, _ = http(port, "GET", "/health", timeout=2)
            if status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    fail(f"{what} did not become ready")


def texts(vocab):
    """llama.cpp's inputs for the vocab file, random text, chat strings."""
    raw = open(os.path.join(MODELS, f"ggml-vocab-{vocab}.gguf.inp"), encoding="utf-8").read()
    out = raw.split("\n__ggml_vocab_test__\n")
    rng = random.Random(7)
    ranges = [(0x20, 0x7e, 60), (0x0a, 0x0a, 4), (0x09, 0x09, 2), (0x20, 0x20, 14), (0xa1, 0xff, 4),
              (0x400, 0x44f, 4), (0x4e00, 0x4fff, 6), (0x1f600, 0x1f64f, 2)]
    weights = [w for _, _, w in ranges]
    for n in range(40):
        chars = []
        for _ in range(rng.randint(1, 400)):
            lo, hi, _ = rng.choices(ranges, weights)[0]
            chars.append(chr(rng.randint(lo, hi)))
        out.append("".join(chars))
    out += ["<s>Hello</s> world", "</s>  two spaces", "<|user|>\nHi there<|end|>\n<|assistant|>\n",
            "<|system|>  You are terse.<|end|> <|user|>x", "  leading and trailing  ", "\n\n\n", "▁▁ literal"]
    return out


def tokenize(port, text, llama_server=False):
    """ids with bos, special tokens parsed (kvfork always parses them)."""
    body = {"content": text, "add_special": True}
    if llama_server:
        body["parse_special"] = True
    status, body = http(port, "POST", "/tokenize", body)
    if status != 200:
        fail(f"/tokenize {text!r}: {status} {body}")
    return body["tokens"]


def check_model(gguf, vocab, chat):
    kv, kv_port = serve([KVFORK, "serve", "--model", gguf, "--threads", "2", "--host", "127.0.0.1"],
                        "kvfork serve")
    try:
        corpus = texts(vocab)
        ours = [tokenize(kv_port, t) for t in corpus]
        if os.path.exists(LLAMA_SERVER):
            ls, ls_port = serve([LLAMA_SERVER, "-m", gguf, "-t", "2", "-c", "256", "-np", "1",
                                 "--host", "127.0.0.1"], "llama-server")
            try:
                theirs = [tokenize(ls_port, t, llama_server=True) for t in corpus]
            finally:
                ls.kill()
                ls.wait()
            bad = [(t, a, b) for t, a, b in zip(corpus, ours, theirs) if a != b]
            for t, a, b in bad[:5]:
                print(f"  {t!r}\n    kvfork    {a}\n    llama.cpp {b}")
            if bad:
                fail(f"{vocab}: {len(bad)} of {len(corpus)} texts tokenize differently from llama-server")
            print(f"{vocab}: {len(corpus)} of {len(corpus)} texts give llama-server's ids")
        else:
            print(f"{vocab}: SKIP the llama-server comparison ({LLAMA_SERVER} is not built)")

        prompt = "The cache is shared block by block"
        status, body = http(kv_port, "POST", "/v1/completions",
                            {"prompt": prompt, "max_tokens": 4, "temperature": 0})
        if status != 200:
            fail(f"{vocab}: /v1/completions: {status} {body}")
        if body["usage"]["prompt_tokens"] != len(tokenize(kv_port, prompt)):
            fail(f"{vocab}: prompt_tokens {body['usage']['prompt_tokens']} is not the prompt's ids")
        if chat:
            messages = [{"role": "user", "content": "Hello"}]
            status, body = http(kv_port, "POST", "/tokenize", {"messages": messages})
            if status != 200:
                fail(f"{vocab}: chat /tokenize: {status} {body}")
            # Phi-3's template: {{ bos_token }}<|user|>\nHello<|end|>\n<|assistant|>\n,
            # <|user|> swallowing the newline after it; one bos.
            want = [1, 32010] + tokenize(kv_port, "Hello")[1:] + [32007, 32001]
            if body["tokens"] != want:
                fail(f"{vocab}: chat prompt ids {body['tokens']}, expected {want}")
            status, body = http(kv_port, "POST", "/v1/chat/completions",
                                {"messages": messages, "max_tokens": 4, "temperature": 0})
            if status != 200 or body["usage"]["prompt_tokens"] != len(want):
                fail(f"{vocab}: /v1/chat/completions: {status} {body}")
            print(f"{vocab}: chat template from tokenizer.chat_template: {want}")
    finally:
        kv.kill()
        kv.wait()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for arch, shape, vocab, size, name, chat in [
                ("gemma3", "tiny", "llama-spm", 32000, "gemma3-spm", False),
                ("phi3", "phi3-tiny", "phi-3", 32064, "Phi3", True)]:
            model = os.path.join(tmp, arch)
            run(["make-model", "--arch", arch, "--shape", shape, "--seed", "3", "--dtype", "f32",
                 "--vocab-size", str(size), "--out", model])
            gguf = os.path.join(tmp, arch + ".gguf")
            run(["export-gguf", "--model", model, "--out", gguf, "--name", name,
                 "--vocab-gguf", os.path.join(MODELS, f"ggml-vocab-{vocab}.gguf")])
            check_model(gguf, vocab, chat)
    print("PASS")


if __name__ == "__main__":
    main()
