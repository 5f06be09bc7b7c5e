"""Qwen3ForCausalLM in plain PyTorch, with the Hugging Face parameter names.

Matches transformers' Qwen3 (and kvfork's src/model/qwen3.cc): RMSNorm before attention and
MLP, per-head RMSNorm of q and k before RoPE (rotate-half layout), grouped-query
attention, SiLU-gated MLP, no biases, optionally tied input/output embeddings.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class Config:
    def __init__(self, vocab_size=4096, hidden_size=256, intermediate_size=768,
                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=64, rope_theta=10000.0, rms_norm_eps=1e-6,
                 max_position_embeddings=1024, tie_word_embeddings=True):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.rope_theta = rope_theta
        self.rms_norm_eps = rms_norm_eps
        self.max_position_embeddings = max_position_embeddings
        self.tie_word_embeddings = tie_word_embeddings

    def to_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, length):
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64)
                                    / cfg.head_dim))
    angles = torch.outer(torch.arange(length, dtype=torch.float64), inv).float()
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        c = self.cfg
        q = self.q_norm(self.q_proj(x).view(b, t, c.num_attention_heads, c.head_dim))
        k = self.k_norm(self.k_proj(x).view(b, t, c.num_key_value_heads, c.head_dim))
        v = self.v_proj(x).view(b, t, c.num_key_value_heads, c.head_dim)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        group = c.num_attention_heads // c.num_key_value_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        # torch 1.13 (Debian 12) has no scaled_dot_product_attention: written out.
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        out = scores.masked_fill(causal, float("-inf")).softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = None
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self):
        # GPT-2 style: N(0, 0.02), residual output projections scaled by depth.
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                continue
            std = 0.02
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                std /= math.sqrt(2 * self.cfg.num_hidden_layers)
            nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = rope_tables(self.cfg, t)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return x @ w.t()

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())
