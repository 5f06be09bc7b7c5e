#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora, one directory per target, from the
project's test data: the real Qwen3 and Llama 3 tokenizers (.cache/npm),
model directories made by `kvfork make-model`, a GGUF made by
`kvfork export-gguf`, the chat-template goldens (tests/data/chat_template)
and the tokenizer goldens' texts (tests/data/tokenizer). Small inputs are
what libFuzzer mutates well, so the big files are cut down first: tokenizers
to their first few hundred tokens, models to the tiny shape on that vocab.

  tests/fuzz/make_seeds.py --kvfork build/asan/src/cli/kvfork --out DIR
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

SEP = b"\n#kvfork-fuzz-part#\n"  # fuzz_targets.h kFilePartSeparator
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def small_tokenizer(src_dir, keep_tokens, keep_added, dst_dir):
    """The real tokenizer cut to ids < keep_tokens (merges among them kept)
    and its first keep_added added tokens renumbered after them."""
    tok = json.load(open(os.path.join(src_dir, "tokenizer.json"), encoding="utf-8"))
    vocab = {t: i for t, i in tok["model"]["vocab"].items() if i < keep_tokens}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = merges
    remap = {}
    added = tok["added_tokens"][:keep_added]
    for n, a in enumerate(added):
        remap[a["id"]] = keep_tokens + n
        a["id"] = keep_tokens + n
    tok["added_tokens"] = added

    def fix(x):  # post_processor ids of special tokens
        if isinstance(x, dict):
            return {k: ([remap.get(i, i) for i in v] if k == "ids" else fix(v)) for k, v in x.items()}
        if isinstance(x, list):
            return [fix(v) for v in x]
        return x

    tok["post_processor"] = fix(tok.get("post_processor"))
    cfg = json.load(open(os.path.join(src_dir, "tokenizer_config.json"), encoding="utf-8"))
    cfg.pop("added_tokens_decoder", None)
    os.makedirs(dst_dir, exist_ok=True)
    with open(os.path.join(dst_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(dst_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False)


def safetensors_bytes(tensors):
    """tensors: [(name, dtype, shape, raw bytes)] -> a .safetensors file."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def gguf_bytes():
    """A small GGUF v3: one key of each value type and two tensors."""
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x
    kv = [
        (s("general.architecture") + struct.pack("<I", 8) + s("llama")),
        (s("general.alignment") + struct.pack("<II", 4, 32)),
        (s("llama.rope.freq_base") + struct.pack("<If", 6, 10000.0)),
        (s("tokenizer.ggml.add_bos_token") + struct.pack("<IB", 7, 1)),
        (s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3) + s("a") + s("b") + s("ab")),
        (s("tokenizer.ggml.token_type") + struct.pack("<IIQ", 9, 5, 3) + struct.pack("<iii", 1, 1, 1)),
        (s("general.file_type") + struct.pack("<IQ", 10, 1)),
    ]
    tensors = [("token_embd.weight", 0, [4, 3], 0), ("output_norm.weight", 1, [4], 64)]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv)
    for name, t, ne, off in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", t, off)
    out += b"\0" * (-len(out) % 32)
    return out + bytes(range(48)) + b"\0" * 16 + bytes(range(8))


def spm_gguf_bytes():
    """A SentencePiece vocabulary (tokenizer.ggml.model "llama") alone: <unk>,
    <s>, </s>, the 256 byte tokens, a few scored pieces and a control token,
    named Phi3 so that its special tokens rstrip (tokenizer/spm_tokenizer.h)."""
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x
    tokens = [("<unk>", 2, 0.0), ("<s>", 3, 0.0), ("</s>", 3, 0.0)]
    tokens += [("<0x%02X>" % b, 6, 0.0) for b in range(256)]
    tokens += [("\u2581", 1, -5.0), ("a", 1, -5.0), ("b", 1, -5.0), ("\u2581a", 1, -1.0),
               ("ab", 1, -2.0), ("<|end|>", 3, 0.0)]
    n = len(tokens)
    kv = [
        (s("general.architecture") + struct.pack("<I", 8) + s("llama")),
        (s("general.name") + struct.pack("<I", 8) + s("Phi3")),
        (s("tokenizer.ggml.model") + struct.pack("<I", 8) + s("llama")),
        (s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, n) + b"".join(s(t) for t, _, _ in tokens)),
        (s("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, n) +
         b"".join(struct.pack("<f", sc) for _, _, sc in tokens)),
        (s("tokenizer.ggml.token_type") + struct.pack("<IIQ", 9, 5, n) +
         b"".join(struct.pack("<i", ty) for _, ty, _ in tokens)),
        (s("tokenizer.ggml.bos_token_id") + struct.pack("<II", 4, 1)),
        (s("tokenizer.ggml.eos_token_id") + struct.pack("<II", 4, 2)),
        (s("tokenizer.ggml.add_space_prefix") + struct.pack("<IB", 7, 1)),
    ]
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv)
    return out + b"\0" * (-len(out) % 32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvfork", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", default=os.path.join(ROOT, ".cache"))
    a = ap.parse_args()
    out = a.out
    shutil.rmtree(out, ignore_errors=True)
    work = os.path.join(out, ".work")
    npm = os.path.join(a.cache, "npm")

    # Tokenizers cut down, loaded whole by tokenizer_load.
    for name, pkg, added in (("qwen3", "tokenizer-qwen3", 26), ("llama3", "tokenizer-llama3", 16)):
        d = os.path.join(work, "tok-" + name)
        small_tokenizer(os.path.join(npm, pkg, "package", "models"), 300, added, d)
        tj = open(os.path.join(d, "tokenizer.json"), "rb").read()
        tc = open(os.path.join(d, "tokenizer_config.json"), "rb").read()
        write(out, "tokenizer_load", name + "_full", tj + SEP + tc + SEP + b'{"eos_token_id": [1, 2]}')
        write(out, "tokenizer_load", name + "_alone", tj)

    # Models on the small Qwen3 tokenizer: config.json, safetensors, GGUF.
    # smollm3 (no_rope_layers) and phi3 (fused tensors, partial rotary,
    # longrope factors) on their tiny shapes; qwen3_moe (router, per-expert
    # safetensors, stacked GGUF experts, expert keys) on tiny's 8 experts.
    for arch, shape, extra in (("qwen3", "tiny", []),
                               ("llama", "tiny", ["--rope-scaling", "1", "--tie", "1"]),
                               ("smollm3", "smollm3-tiny", []),
                               ("phi3", "phi3-tiny", ["--rope-scaling", "1"]),
                               ("qwen3_moe", "tiny", [])):
        m = os.path.join(work, "model-" + arch)
        subprocess.run([a.kvfork, "make-model", "--arch", arch, "--shape", shape, "--seed", "1",
                        "--dtype", "bf16", "--tokenizer", os.path.join(work, "tok-qwen3"),
                        "--out", m] + extra, check=True, stdout=subprocess.DEVNULL)
        write(out, "model_config", arch, open(os.path.join(m, "config.json"), "rb").read())
        gguf = os.path.join(work, arch + ".gguf")
        subprocess.run([a.kvfork, "export-gguf", "--model", m, "--out", gguf, "--dtype", "bf16"],
                       check=True, stdout=subprocess.DEVNULL)
        write(out, "gguf", arch, open(gguf, "rb").read())
        # The real header over tiny data: every tensor cut to its first 2 elements.
        st = open(os.path.join(m, "model.safetensors"), "rb").read()
        (n,) = struct.unpack("<Q", st[:8])
        header = json.loads(st[8:8 + n])
        header.pop("__metadata__", None)
        small = [(k, v["dtype"], [2], st[8 + n + v["data_offsets"][0]:][:4])
                 for k, v in sorted(header.items())]
        write(out, "safetensors", arch + "_tiny", safetensors_bytes(small))
        half = len(small) // 2
        index = {"metadata": {"total_size": 4 * len(small)},
                 "weight_map": {t[0]: "model-0000%d-of-00002.safetensors" % (1 + (i >= half))
                                for i, t in enumerate(small)}}
        write(out, "safetensors", arch + "_sharded",
              json.dumps(index).encode() + SEP + safetensors_bytes(small[:half]) + SEP +
              safetensors_bytes(small[half:]))
    write(out, "gguf", "small", gguf_bytes())
    write(out, "gguf", "spm_vocab", spm_gguf_bytes())
    write(out, "safetensors", "dtypes", safetensors_bytes([
        ("a", "F32", [2, 3], bytes(24)), ("b", "BF16", [4], bytes(8)), ("c", "F16", [1, 1], bytes(2))]))

    # Chat templates: each real template with a few golden contexts.
    goldens = json.load(open(os.path.join(ROOT, "tests/data/chat_template/goldens.json"), encoding="utf-8"))
    templates = {
        "qwen3": json.load(open(os.path.join(npm, "tokenizer-qwen3/package/models/tokenizer_config.json"),
                                encoding="utf-8"))["chat_template"],
        "llama3": json.load(open(os.path.join(npm, "tokenizer-llama3/package/models/tokenizer_config.json"),
                                 encoding="utf-8"))["chat_template"],
    }
    tdir = os.path.join(a.cache, "llama.cpp/models/templates")
    for name, f in (("llama3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja"),
                    ("llama3.2", "meta-llama-Llama-3.2-3B-Instruct.jinja")):
        if os.path.exists(os.path.join(tdir, f)):
            templates[name] = open(os.path.join(tdir, f), encoding="utf-8").read()
    count = {}
    for g in goldens:
        name = g["template"]
        if name not in templates or count.get(name, 0) >= 6:
            continue
        count[name] = count.get(name, 0) + 1
        write(out, "chat_template", "%s_%d" % (name, count[name]),
              templates[name].encode() + SEP + json.dumps(g["context"], ensure_ascii=False).encode())

    # Texts to encode: the tokenizer goldens' inputs, for both tokenizers.
    n = 0
    for f in ("goldens_qwen3.json", "goldens_llama3.json"):
        g = json.load(open(os.path.join(ROOT, "tests/data/tokenizer", f), encoding="utf-8"))
        for item in g["cases"][:40]:
            text = item["text"]
            if len(text) > 2000:
                continue
            for mode in (0, 1, 5):
                write(out, "encode_decode", "text_%03d_%d" % (n, mode), bytes([mode]) + text.encode())
            n += 1
    write(out, "encode_decode", "ids_qwen", bytes([3]) + struct.pack("<8I", 9707, 11, 1879, 0, 151643, 151645, 256, 99))
    write(out, "encode_decode", "ids_llama", bytes([2]) + struct.pack("<6I", 128000, 9906, 1917, 128009, 0, 1))
    # The SentencePiece vocab files (mode & 8: Llama 2's, with & 1 Phi-3's).
    write(out, "encode_decode", "spm_text_llama2", bytes([8]) + " Hello  w\xf6rld\n\t\u4f60\u597d".encode() + b"\xff")
    write(out, "encode_decode", "spm_text_phi3", bytes([13]) + "<|user|>\n Hi<|end|>\n<|assistant|>".encode())
    write(out, "encode_decode", "spm_ids_phi3", bytes([11]) + struct.pack("<6I", 1, 29871, 15043, 32007, 2, 13))

    # The checked-in seeds (tests/fuzz/seeds/<target>: the request bodies, and
    # a few of the above the unit tier replays) join the generated ones.
    seeds = os.path.join(ROOT, "tests/fuzz/seeds")
    for target in sorted(os.listdir(seeds)):
        for f in sorted(os.listdir(os.path.join(seeds, target))):
            write(out, target, "checked_in_" + f, open(os.path.join(seeds, target, f), "rb").read())
    shutil.rmtree(work)
    for t in sorted(os.listdir(out)):
        print("%-16s %3d seeds" % (t, len(os.listdir(os.path.join(out, t)))))


if __name__ == "__main__":
    sys.exit(main())
