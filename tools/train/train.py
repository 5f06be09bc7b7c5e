"""Trains the small Qwen3 model: a pretraining phase on the corpus, then a chat-shaped finish.

Deterministic given --seed and --threads: batch b of step s is drawn from a generator seeded
with (seed, s), and a checkpoint holds the weights, the optimizer state and the step, so a run
stopped and resumed (same flags) reaches the same weights as one that never stopped.

  train.py --tok build/train/tok --out build/train/run   # resumes from run/ckpt.pt if present
  train.py --tok build/train/tok --bench 5              # tokens/s of this size, nothing saved
"""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from model import Config, Qwen3

SIZE_FLAGS = ["hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim"]


def load_u16(path):
    return torch.from_numpy(np.fromfile(path, dtype=np.uint16).astype(np.int64))


class Data:
    def __init__(self, tok_dir, im_start_id):
        self.train = load_u16(os.path.join(tok_dir, "train.u16"))
        self.heldout = load_u16(os.path.join(tok_dir, "heldout.u16"))
        self.chat = load_u16(os.path.join(tok_dir, "chat.u16"))
        self.chat_mask = torch.from_numpy(
            np.fromfile(os.path.join(tok_dir, "chat_mask.u8"), dtype=np.uint8).astype(bool))
        # Each exchange holds two <|im_start|> (user, assistant); a window starts at a user's.
        self.chat_starts = torch.nonzero(self.chat == im_start_id).flatten()[::2]

    def batch(self, rng, rows, chat_rows, ctx):
        """(inputs, targets) of rows windows; targets -100 where no loss is taken."""
        x = torch.empty(rows, ctx, dtype=torch.int64)
        y = torch.empty(rows, ctx, dtype=torch.int64)
        for r in range(rows):
            if r < chat_rows:
                limit = len(self.chat) - ctx - 1
                start = int(self.chat_starts[rng.integers(len(self.chat_starts))])
                start = min(start, limit)
                window = self.chat[start:start + ctx + 1]
                keep = self.chat_mask[start + 1:start + ctx + 1]
                x[r] = window[:-1]
                y[r] = torch.where(keep, window[1:], torch.full_like(window[1:], -100))
            else:
                start = int(rng.integers(len(self.train) - ctx - 1))
                window = self.train[start:start + ctx + 1]
                x[r], y[r] = window[:-1], window[1:]
        return x, y


def lr_at(step, args):
    """Warmup, then constant until the finish phase, which decays linearly to a tenth.

    The pretraining rate does not depend on --pretrain-steps, so a run may be given its
    length late (resume with the step reached as --pretrain-steps) and stay reproducible.
    """
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    if step < args.pretrain_steps:
        return args.lr
    p = (step - args.pretrain_steps) / max(1, args.chat_steps)
    return args.lr * (1 - 0.9 * p)


@torch.no_grad()
def heldout_loss(model, data, ctx, windows=16):
    model.eval()
    total, n = 0.0, 0
    stride = max(ctx, (len(data.heldout) - ctx - 1) // windows)
    for start in range(0, len(data.heldout) - ctx - 1, stride):
        w = data.heldout[start:start + ctx + 1]
        logits = model(w[None, :-1])
        total += F.cross_entropy(logits[0], w[1:], reduction="sum").item()
        n += ctx
    model.train()
    return total / n


def save_checkpoint(path, model, opt, step, args):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "args": vars(args)}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tok", required=True, help="directory written by tokenize_corpus.py")
    ap.add_argument("--out", help="run directory: ckpt.pt, config.json, log")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="windows per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--pretrain-steps", type=int, default=2000)
    ap.add_argument("--chat-steps", type=int, default=300)
    ap.add_argument("--chat-fraction", type=float, default=0.5,
                    help="share of each finish-phase batch that is conversations")
    ap.add_argument("--checkpoint-every", type=int, default=20, help="steps")
    ap.add_argument("--bf16", type=int, default=1, help="1: bf16 autocast for matmuls")
    ap.add_argument("--bench", type=int, default=0, help="time this many steps and exit")
    defaults = Config()
    for name in SIZE_FLAGS:
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with open(os.path.join(args.tok, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    vocab_size = len(tok["model"]["vocab"]) + len(tok["added_tokens"])
    im_start = next(t["id"] for t in tok["added_tokens"] if t["content"] == "<|im_start|>")
    cfg = Config(vocab_size=vocab_size, **{n: getattr(args, n) for n in SIZE_FLAGS})
    model = Qwen3(cfg)
    data = Data(args.tok, im_start)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    total_steps = args.pretrain_steps + args.chat_steps
    print(f"params {model.num_parameters() / 1e6:.2f}M, config {cfg.to_dict()}", flush=True)

    step = 0
    ckpt = os.path.join(args.out, "ckpt.pt") if args.out else None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "config.json"), "w") as f:
            json.dump({"model": cfg.to_dict(), "train": vars(args)}, f, indent=1)
        if os.path.exists(ckpt):
            state = torch.load(ckpt)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            step = state["step"]
            print(f"resumed at step {step}", flush=True)

    t0, tokens_done = time.time(), 0
    last = args.bench if args.bench else total_steps
    while step < last:
        rng = np.random.default_rng([args.seed, step])
        chat_rows = round(args.batch * args.chat_fraction) if step >= args.pretrain_steps else 0
        x, y = data.batch(rng, args.batch, chat_rows, args.ctx)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        # bf16 matmuls (oneDNN; AMX where the CPU has it, ~19x fp32 OpenBLAS here), fp32
        # master weights, optimizer state and loss.
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=bool(args.bf16)):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, cfg.vocab_size), y.view(-1),
                               ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_done += x.numel()
        if step % 10 == 0 or args.bench:
            dt = time.time() - t0
            print(f"step {step}/{total_steps} loss {loss.item():.4f} lr {lr_at(step - 1, args):.2e} "
                  f"{tokens_done / dt:.0f} tok/s elapsed {dt:.0f}s", flush=True)
        if args.out and (step % args.checkpoint_every == 0 or step == total_steps):
            save_checkpoint(ckpt, model, opt, step, args)
            if step % (args.checkpoint_every * 10) == 0 or step == total_steps:
                print(f"step {step} heldout loss {heldout_loss(model, data, args.ctx):.4f}",
                      flush=True)
    if args.bench:
        print(f"bench: {tokens_done / (time.time() - t0):.0f} tok/s", flush=True)


if __name__ == "__main__":
    main()
