"""GGUF models with a SentencePiece vocabulary (tokenizer.ggml.model "llama",
tokenizer/spm_tokenizer.h) load and serve with the tokenizer from their own
metadata:
  - a Gemma 3 model (make-model --arch gemma3, 32000-token vocabulary) with a
    Gemma-style vocabulary: llama.cpp's Llama 2 vocab file with its last two
    tokens made the control tokens <start_of_turn> and <end_of_turn>,
    add_space_prefix false and Gemma 2's chat template (Gemma 3's files are
    written so; their 262k-token vocabulary is not at hand);
  - a Phi-3 model (phi3-tiny, 32064 tokens) with those of llama.cpp's Phi-3
    vocab file and general.name "Phi3", which brings its chat template and
    the rstrip llama.cpp gives Phi-3's special tokens.
On each, `kvfork serve` answers /tokenize, /v1/completions and
/v1/chat/completions with the template from tokenizer.chat_template. Where
llama.cpp's llama-server is built (scripts/setup-llama-tools.sh), the ids of
/tokenize (add_special, special tokens parsed) must be llama-server's on the
same file for llama.cpp's test inputs, random multilingual text and chat
strings, and a chat's prompt ids must be those of llama-server's
/apply-template text; without it those comparisons are skipped and said so."""

import os
import random
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvfork_test_env import CACHE, KVFORK, fail, free_port, http  # noqa: E402

MODELS = os.path.join(CACHE, "llama.cpp/models")
LLAMA_SERVER = os.path.join(os.environ.get("LLAMA_BIN_DIR", os.path.join(CACHE, "llama-server/build/bin")),
                            "llama-server")


def read_gguf_metadata(path):
    """[(key, type, raw value bytes)] of a GGUF file's metadata, in order."""
    data = open(path, "rb").read()
    assert data[:4] == b"GGUF"
    _, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    at = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t, at):
        if t == 8:
            (n,) = struct.unpack_from("<Q", data, at)
            return at + 8 + n
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, at)
            at += 12
            for _ in range(n):
                at = skip(et, at)
            return at
        return at + sizes[t]
    out = []
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", data, at)
        key = data[at + 8:at + 8 + n].decode()
        (t,) = struct.unpack_from("<I", data, at + 8 + n)
        begin = at + 12 + n
        at = skip(t, begin)
        out.append((key, t, data[begin:at]))
    return out


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gemma_style_vocab(out_path):
    """Llama 2's vocab file made Gemma-like (see the module comment)."""
    kv = read_gguf_metadata(os.path.join(MODELS, "ggml-vocab-llama-spm.gguf"))
    template = open(os.path.join(MODELS, "templates/google-gemma-2-2b-it.jinja"), encoding="utf-8").read()
    entries = []
    for key, t, raw in kv:
        if key == "tokenizer.ggml.tokens":
            et, n = struct.unpack_from("<IQ", raw, 0)
            at, tokens = 12, []
            for _ in range(n):
                (k,) = struct.unpack_from("<Q", raw, at)
                tokens.append(raw[at + 8:at + 8 + k].decode())
                at += 8 + k
            tokens[-2:] = ["<start_of_turn>", "<end_of_turn>"]
            raw = struct.pack("<IQ", et, n) + b"".join(gguf_string(x) for x in tokens)
        elif key == "tokenizer.ggml.token_type":
            types = list(struct.unpack_from("<%di" % ((len(raw) - 12) // 4), raw, 12))
            types[-2:] = [3, 3]
            raw = raw[:12] + struct.pack("<%di" % len(types), *types)
        entries.append((key, t, raw))
    entries.append(("tokenizer.ggml.add_space_prefix", 7, b"\0"))
    entries.append(("tokenizer.chat_template", 8, gguf_string(template)))
    body = b"".join(gguf_string(k) + struct.pack("<I", t) + raw for k, t, raw in entries)
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + body
    with open(out_path, "wb") as f:
        f.write(out + b"\0" * (-len(out) % 32))


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


def texts(inputs):
    """llama.cpp's inputs for a vocab file, random text, chat strings."""
    raw = open(os.path.join(MODELS, f"ggml-vocab-{inputs}.gguf.inp"), encoding="utf-8").read()
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
            "<|system|>  You are terse.<|end|> <|user|>x", "  leading and trailing  ", "\n\n\n", "▁▁ literal",
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "x<end_of_turn> y"]
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


def chat_ids_from_llama_server(port, messages):
    """The ids llama-server would run for a chat: its template text, tokenized
    with special tokens; a BOS the template wrote is kept as the one BOS."""
    status, body = http(port, "POST", "/apply-template", {"messages": messages})
    if status != 200:
        fail(f"llama-server /apply-template: {status} {body}")
    status, toks = http(port, "POST", "/tokenize",
                        {"content": body["prompt"], "add_special": False, "parse_special": True})
    if status != 200:
        fail(f"llama-server /tokenize: {status} {toks}")
    ids = toks["tokens"]
    # llama.cpp drops a leading BOS text from the template when its tokenizer
    # adds BOS itself: the prompt it runs starts with one BOS either way.
    return ids if ids[:1] == [1] else [1] + ids


def check_model(gguf, name, inputs):
    kv, kv_port = serve([KVFORK, "serve", "--model", gguf, "--threads", "2", "--host", "127.0.0.1"],
                        "kvfork serve")
    messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
                {"role": "user", "content": "Tell me  a story"}]
    try:
        corpus = texts(inputs)
        ours = [tokenize(kv_port, t) for t in corpus]
        status, body = http(kv_port, "POST", "/tokenize", {"messages": messages})
        if status != 200:
            fail(f"{name}: chat /tokenize: {status} {body}")
        our_chat = body["tokens"]
        if os.path.exists(LLAMA_SERVER):
            ls, ls_port = serve([LLAMA_SERVER, "-m", gguf, "-t", "2", "-c", "256", "-np", "1",
                                 "--host", "127.0.0.1", "--jinja"], "llama-server")
            try:
                theirs = [tokenize(ls_port, t, llama_server=True) for t in corpus]
                their_chat = chat_ids_from_llama_server(ls_port, messages)
            finally:
                ls.kill()
                ls.wait()
            bad = [(t, a, b) for t, a, b in zip(corpus, ours, theirs) if a != b]
            for t, a, b in bad[:5]:
                print(f"  {t!r}\n    kvfork    {a}\n    llama.cpp {b}")
            if bad:
                fail(f"{name}: {len(bad)} of {len(corpus)} texts tokenize differently from llama-server")
            print(f"{name}: {len(corpus)} of {len(corpus)} texts give llama-server's ids")
            if our_chat != their_chat:
                fail(f"{name}: chat prompt ids {our_chat}, llama-server's {their_chat}")
            print(f"{name}: chat prompt ids equal llama-server's: {our_chat}")
        else:
            print(f"{name}: SKIP the llama-server comparison ({LLAMA_SERVER} is not built)")
        if our_chat[:1] != [1] or our_chat.count(1) != 1:
            fail(f"{name}: chat prompt ids {our_chat} do not start with one BOS")

        prompt = "The cache is shared block by block"
        status, body = http(kv_port, "POST", "/v1/completions",
                            {"prompt": prompt, "max_tokens": 4, "temperature": 0})
        if status != 200:
            fail(f"{name}: /v1/completions: {status} {body}")
        if body["usage"]["prompt_tokens"] != len(tokenize(kv_port, prompt)):
            fail(f"{name}: prompt_tokens {body['usage']['prompt_tokens']} is not the prompt's ids")
        status, body = http(kv_port, "POST", "/v1/chat/completions",
                            {"messages": messages, "max_tokens": 4, "temperature": 0})
        if status != 200 or body["usage"]["prompt_tokens"] != len(our_chat):
            fail(f"{name}: /v1/chat/completions: {status} {body}")
    finally:
        kv.kill()
        kv.wait()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        gemma_vocab = os.path.join(tmp, "gemma-style-vocab.gguf")
        gemma_style_vocab(gemma_vocab)
        for arch, shape, vocab, size, name, inputs in [
                ("gemma3", "tiny", gemma_vocab, 32000, "gemma3-spm", "llama-spm"),
                ("phi3", "phi3-tiny", os.path.join(MODELS, "ggml-vocab-phi-3.gguf"), 32064, "Phi3",
                 "phi-3")]:
            model = os.path.join(tmp, arch)
            run(["make-model", "--arch", arch, "--shape", shape, "--seed", "3", "--dtype", "f32",
                 "--vocab-size", str(size), "--out", model])
            gguf = os.path.join(tmp, arch + ".gguf")
            run(["export-gguf", "--model", model, "--out", gguf, "--name", name, "--vocab-gguf", vocab])
            check_model(gguf, name, inputs)
    print("PASS")


if __name__ == "__main__":
    main()
