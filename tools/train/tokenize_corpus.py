"""Trains the BPE tokenizer on the training text and writes it with the token streams.

Writes to --out: tokenizer.json, tokenizer_config.json, train.u16 / heldout.u16 (uint16 ids,
documents joined by <|endoftext|>), chat.u16 + chat_mask.u8 (ChatML conversations; the
mask marks the assistant tokens the finish phase learns from).
"""
import argparse
import json
import os
import time

import numpy as np

import bpe


def chat_ids(tok, pair):
    """One ChatML exchange, as the chat template renders it, and its loss mask."""
    prompt = f"<|im_start|>user\n{pair['user']}<|im_end|>\n<|im_start|>assistant\n"
    reply = f"{pair['assistant']}<|im_end|>\n"
    p, r = tok.encode(prompt), tok.encode(reply)
    return p + r, [0] * len(p) + [1] * len(r)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", required=True, help="directory written by corpus.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=4096)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.corpus, "train.txt"), encoding="utf-8") as f:
        train_text = f.read()
    with open(os.path.join(args.corpus, "heldout.txt"), encoding="utf-8") as f:
        heldout_text = f.read()
    t0 = time.time()
    tokens, merges = bpe.train([train_text], args.vocab)
    tok = bpe.Tokenizer(tokens, merges)
    print(f"trained vocab {tok.vocab_size} ({len(merges)} merges) in {time.time() - t0:.0f}s")
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok.to_json(), f, ensure_ascii=False, indent=1)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(bpe.tokenizer_config(), f, ensure_ascii=False, indent=1)
    for name, text in (("train", train_text), ("heldout", heldout_text)):
        ids = np.array(tok.encode(text), dtype=np.uint16)
        ids.tofile(os.path.join(args.out, f"{name}.u16"))
        print(f"{name}: {len(text)} chars -> {len(ids)} tokens")
    ids, mask = [], []
    with open(os.path.join(args.corpus, "chat.jsonl"), encoding="utf-8") as f:
        for line in f:
            i, m = chat_ids(tok, json.loads(line))
            ids += i
            mask += m
    np.array(ids, dtype=np.uint16).tofile(os.path.join(args.out, "chat.u16"))
    np.array(mask, dtype=np.uint8).tofile(os.path.join(args.out, "chat_mask.u8"))
    print(f"chat: {len(ids)} tokens, {sum(mask)} learned")


if __name__ == "__main__":
    main()
