"""Writes a training checkpoint as a Hugging Face model directory.

  export.py --run build/train/run --tok build/train/tok --out models/trained/kjv-4m

The directory holds config.json (Qwen3ForCausalLM), generation_config.json,
model.safetensors (bf16, round to nearest even as torch's .to(bfloat16)),
tokenizer.json and tokenizer_config.json (copied from --tok).
"""
import argparse
import json
import os
import shutil
import struct

import torch


def write_safetensors(path, tensors, metadata):
    """safetensors: u64 header length, JSON header (names, dtypes, shapes, offsets), data."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        assert t.dtype == torch.bfloat16
        data = t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--run", required=True, help="training run directory (ckpt.pt, config.json)")
    ap.add_argument("--tok", required=True, help="tokenizer directory")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    with open(os.path.join(args.run, "config.json")) as f:
        run = json.load(f)
    m = run["model"]
    state = torch.load(os.path.join(args.run, "ckpt.pt"))
    with open(os.path.join(args.tok, "tokenizer.json"), encoding="utf-8") as f:
        added = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    os.makedirs(args.out, exist_ok=True)
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": m["vocab_size"],
        "hidden_size": m["hidden_size"],
        "intermediate_size": m["intermediate_size"],
        "num_hidden_layers": m["num_hidden_layers"],
        "num_attention_heads": m["num_attention_heads"],
        "num_key_value_heads": m["num_key_value_heads"],
        "head_dim": m["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": m["max_position_embeddings"],
        "rms_norm_eps": m["rms_norm_eps"],
        "rope_theta": m["rope_theta"],
        "rope_scaling": None,
        "tie_word_embeddings": m["tie_word_embeddings"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "eos_token_id": added["<|im_end|>"],
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
        "use_cache": True,
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [added["<|im_end|>"], added["<|endoftext|>"]],
                   "pad_token_id": added["<|endoftext|>"]}, f, indent=1)
    tensors = {k: v.to(torch.bfloat16) for k, v in state["model"].items()}
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors,
                      {"format": "pt", "step": str(state["step"])})
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.tok, name), os.path.join(args.out, name))
    n = sum(v.numel() for v in tensors.values())
    print(f"wrote {args.out}: {n / 1e6:.2f}M parameters, step {state['step']}")


if __name__ == "__main__":
    main()
