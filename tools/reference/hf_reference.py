#!/usr/bin/python3
"""Independent float64 reference for LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
SmolLM3ForCausalLM, Phi3ForCausalLM, MistralForCausalLM, Gemma3ForCausalLM and Qwen3MoeForCausalLM.

Written from the Hugging Face transformers definitions (modeling_llama.py,
modeling_qwen2.py, modeling_qwen3.py, modeling_smollm3.py, modeling_phi3.py,
modeling_mistral.py, modeling_gemma3.py, modeling_qwen3_moe.py, modeling_rope_utils.py,
masking_utils.py), not from kvfork's C++: it reads
the same config.json and safetensors and computes the logits of every
position of a prompt in float64 with numpy.

Usage: hf_reference.py --model DIR --prompt-ids 1,2,3 --out logits.f64
Writes raw little-endian float64 logits [num_tokens, vocab_size].
Needs numpy (Debian python3-numpy: run with /usr/bin/python3).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[base + b:base + end]
        shape = e["shape"]
        dt = e["dtype"]
        if dt == "F32":
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif dt == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif dt == "BF16":
            u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32).astype(np.float64)
        else:
            raise ValueError(f"{path}: tensor {name}: dtype {dt} not supported")
        out[name] = arr.reshape(shape)
    return out


def load_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        w = {}
        for s in shards:
            w.update(read_safetensors(os.path.join(model_dir, s)))
        return w
    return read_safetensors(os.path.join(model_dir, "model.safetensors"))


def rope_inv_freq(cfg, head_dim, seq_len):
    """(inv_freq [dim / 2], attention_scaling); dim = the rotary dims."""
    # modeling_rope_utils._compute_default_rope_parameters
    base = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    rs = cfg.get("rope_scaling")
    if rs is None:
        return inv_freq, 1.0
    rtype = rs.get("rope_type", rs.get("type"))
    if rtype in (None, "default"):
        return inv_freq, 1.0
    if rtype in ("longrope", "su"):
        # _compute_longrope_parameters (Phi3): factor from the configured
        # contexts; the long factors once the sequence passes the pretrained
        # context (the dynamic update of Phi3RotaryEmbedding, seq_len =
        # max position + 1), the short ones before.
        original = rs.get("original_max_position_embeddings",
                          cfg.get("original_max_position_embeddings"))
        if original is not None:
            factor = cfg["max_position_embeddings"] / original
        else:
            original = cfg["max_position_embeddings"]
            factor = rs.get("factor", 1.0)
        attention_factor = rs.get("attention_factor")
        if attention_factor is None:
            attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
        ext = np.array(rs["long_factor"] if seq_len > original else rs["short_factor"], dtype=np.float64)
        inv_freq = 1.0 / (ext * base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
        return inv_freq, attention_factor
    if rtype != "llama3":
        raise ValueError(f"rope type {rtype} not supported")
    # modeling_rope_utils._compute_llama3_parameters
    factor = rs["factor"]
    low_freq_factor = rs["low_freq_factor"]
    high_freq_factor = rs["high_freq_factor"]
    old_context_len = rs["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return np.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama), 1.0


def rms_norm(x, weight, eps):
    # LlamaRMSNorm / Qwen3RMSNorm
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return weight * (x / np.sqrt(variance + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def round_to_bf16(x):
    """float64 -> nearest bf16 (via float32, round to nearest even), as float64."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def forward(cfg, w, ids, matmul_input_bf16=False):
    # matmul_input_bf16 models the one numeric choice kvfork declares for
    # bf16 weights (kernels/ops.h, as llama.cpp does): each matmul's input
    # row is rounded to bf16 before the dot product. Everything else stays
    # float64, so the comparison still checks the whole architecture.
    def mm(h, name):
        if matmul_input_bf16:
            h = round_to_bf16(h)
        return h @ w[name].T

    arch = cfg["architectures"][0]
    if arch not in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "SmolLM3ForCausalLM",
                    "Phi3ForCausalLM", "MistralForCausalLM", "Qwen3MoeForCausalLM"):
        raise ValueError(f"architecture {arch} not supported")
    qwen3 = arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
    moe_layers = qwen3_moe_layers(cfg) if arch == "Qwen3MoeForCausalLM" else [False] * cfg["num_hidden_layers"]
    phi3 = arch == "Phi3ForCausalLM"
    hidden = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or hidden // nh
    eps = cfg["rms_norm_eps"]
    n_layers = cfg["num_hidden_layers"]
    T = len(ids)

    # Phi3Attention: RoPE on the first int(head_dim * partial_rotary_factor)
    # dims of each head, the rest passed through.
    rot = int(hd * cfg.get("partial_rotary_factor", 1.0)) if phi3 else hd
    # SmolLM3Attention: use_rope = config.no_rope_layers[layer_idx]; the
    # config's default is every no_rope_layer_interval-th layer without.
    if arch == "SmolLM3ForCausalLM":
        interval = cfg.get("no_rope_layer_interval", 4)
        use_rope = cfg.get("no_rope_layers") or [int((l + 1) % interval != 0) for l in range(n_layers)]
    else:
        use_rope = [1] * n_layers

    x = w["model.embed_tokens.weight"][np.array(ids)]  # [T, hidden]
    inv_freq, attention_scaling = rope_inv_freq(cfg, rot, T)
    pos = np.arange(T, dtype=np.float64)
    freqs = np.outer(pos, inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)  # [T, rot]
    cos = (np.cos(emb) * attention_scaling)[:, None, :]
    sin = (np.sin(emb) * attention_scaling)[:, None, :]

    def rope(t):
        r = t[..., :rot]
        r = r * cos + rotate_half(r) * sin
        return np.concatenate([r, t[..., rot:]], axis=-1)
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    if arch == "MistralForCausalLM" and cfg.get("sliding_window") is not None:
        # masking_utils.sliding_window_overlay: kv_idx > q_idx - sliding_window
        # is kept, so query t drops the keys s with t - s >= sliding_window.
        window = cfg["sliding_window"]
        t_idx = np.arange(T)[:, None]
        s_idx = np.arange(T)[None, :]
        mask = np.where(t_idx - s_idx >= window, -np.inf, mask)
    groups = nh // nkv

    for l in range(n_layers):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        if phi3:  # Phi3Attention: one qkv_proj, split q | k | v
            qkv = mm(h, p + "self_attn.qkv_proj.weight")
            q = qkv[:, :nh * hd]
            k = qkv[:, nh * hd:(nh + nkv) * hd]
            v = qkv[:, (nh + nkv) * hd:]
        else:
            q = mm(h, p + "self_attn.q_proj.weight")
            k = mm(h, p + "self_attn.k_proj.weight")
            v = mm(h, p + "self_attn.v_proj.weight")
        if arch == "Qwen2ForCausalLM":  # Qwen2Attention: bias on q, k, v
            q = q + w[p + "self_attn.q_proj.bias"]
            k = k + w[p + "self_attn.k_proj.bias"]
            v = v + w[p + "self_attn.v_proj.bias"]
        q = q.reshape(T, nh, hd)
        k = k.reshape(T, nkv, hd)
        v = v.reshape(T, nkv, hd)
        if qwen3:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        if use_rope[l]:
            q = rope(q)
            k = rope(k)
        k = np.repeat(k, groups, axis=1)  # repeat_kv
        v = np.repeat(v, groups, axis=1)
        # [heads, T, T]
        scores = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + mask[None]
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", probs, v).reshape(T, nh * hd)
        x = x + mm(attn, p + "self_attn.o_proj.weight")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        if moe_layers[l]:
            x = x + qwen3_moe_block(cfg, mm, p, h)
            continue
        if phi3:  # Phi3MLP: gate_up_proj, chunked gate | up
            gate_up = mm(h, p + "mlp.gate_up_proj.weight")
            gate, up = np.split(gate_up, 2, axis=-1)
        else:
            gate = mm(h, p + "mlp.gate_proj.weight")
            up = mm(h, p + "mlp.up_proj.weight")
        act = gate / (1.0 + np.exp(-gate)) * up
        x = x + mm(act, p + "mlp.down_proj.weight")
    x = rms_norm(x, w["model.norm.weight"], eps)
    if cfg.get("tie_word_embeddings", False):
        return mm(x, "model.embed_tokens.weight")
    return mm(x, "lm_head.weight")


def qwen3_moe_layers(cfg):
    """Qwen3MoeDecoderLayer: layer l is sparse when it is not in
    mlp_only_layers, num_experts > 0 and (l + 1) % decoder_sparse_step == 0."""
    only = cfg.get("mlp_only_layers") or []
    step = cfg.get("decoder_sparse_step", 1)
    n_exp = cfg.get("num_experts", 128)
    return [l not in only and n_exp > 0 and (l + 1) % step == 0 for l in range(cfg["num_hidden_layers"])]


def qwen3_moe_block(cfg, mm, p, h):
    """Qwen3MoeSparseMoeBlock: router softmax over all experts, the top
    num_experts_per_tok (ties to the lower index, a stable sort), divided by
    their sum when norm_topk_prob, and the chosen experts' SwiGLU outputs
    summed with those weights."""
    n_exp = cfg.get("num_experts", 128)
    k = cfg.get("num_experts_per_tok", 8)
    logits = mm(h, p + "mlp.gate.weight")  # [T, experts]
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        top = np.argsort(-probs[t], kind="stable")[:k]
        weights = probs[t, top]
        if cfg.get("norm_topk_prob", False):
            weights = weights / weights.sum()
        for e, wt in zip(top, weights):
            assert 0 <= e < n_exp
            q = f"{p}mlp.experts.{e}."
            gate = mm(h[t:t + 1], q + "gate_proj.weight")
            up = mm(h[t:t + 1], q + "up_proj.weight")
            act = gate / (1.0 + np.exp(-gate)) * up
            out[t] += wt * mm(act, q + "down_proj.weight")[0]
    return out


def gelu_tanh(x):
    # transformers ACT2FN["gelu_pytorch_tanh"]
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gemma3_layer_types(cfg):
    n = cfg["num_hidden_layers"]
    if cfg.get("layer_types") is not None:
        return cfg["layer_types"]
    # Gemma3TextConfig: every sliding_window_pattern-th layer is global.
    pattern = cfg.get("sliding_window_pattern", 6)
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]


def forward_gemma3(cfg, w, ids, matmul_input_bf16=False):
    """Gemma3ForCausalLM (text), from modeling_gemma3.py."""
    def mm(h, name):
        if matmul_input_bf16:
            h = round_to_bf16(h)
        return h @ w[name].T

    def norm(x, name):
        # Gemma3RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + weight)
        return rms_norm(x, 1.0 + w[name], eps)

    hidden = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim", 256)
    eps = cfg.get("rms_norm_eps", 1e-6)
    n_layers = cfg["num_hidden_layers"]
    window = cfg.get("sliding_window", 4096)
    scaling = cfg.get("query_pre_attn_scalar", 256) ** -0.5
    cap = cfg.get("final_logit_softcapping")
    if cfg.get("attn_logit_softcapping") is not None:
        raise ValueError("attn_logit_softcapping not supported")
    T = len(ids)
    # Gemma3TextScaledWordEmbedding: embeddings * sqrt(hidden_size)
    x = w["model.embed_tokens.weight"][np.array(ids)] * math.sqrt(hidden)
    pos = np.arange(T, dtype=np.float64)

    def rope_tables(inv_freq):
        freqs = np.outer(pos, inv_freq)
        emb = np.concatenate([freqs, freqs], axis=-1)
        return np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]

    # Gemma 3 has no longrope: attention scaling 1, seq_len unused.
    global_rope = rope_tables(rope_inv_freq(dict(cfg, rope_theta=cfg.get("rope_theta", 1000000.0)), hd, T)[0])
    local_rope = rope_tables(rope_inv_freq({"rope_theta": cfg.get("rope_local_base_freq", 10000.0)}, hd, T)[0])
    causal = np.triu(np.full((T, T), -np.inf), k=1)
    t_idx = np.arange(T)[:, None]
    s_idx = np.arange(T)[None, :]
    sliding = np.where(t_idx - s_idx >= window, -np.inf, causal)
    groups = nh // nkv
    types = gemma3_layer_types(cfg)

    for l in range(n_layers):
        p = f"model.layers.{l}."
        is_sliding = types[l] == "sliding_attention"
        cos, sin = local_rope if is_sliding else global_rope
        mask = sliding if is_sliding else causal
        h = norm(x, p + "input_layernorm.weight")
        q = mm(h, p + "self_attn.q_proj.weight").reshape(T, nh, hd)
        k = mm(h, p + "self_attn.k_proj.weight").reshape(T, nkv, hd)
        v = mm(h, p + "self_attn.v_proj.weight").reshape(T, nkv, hd)
        q = norm(q, p + "self_attn.q_norm.weight")
        k = norm(k, p + "self_attn.k_norm.weight")
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, groups, axis=1)
        v = np.repeat(v, groups, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) * scaling + mask[None]
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", probs, v).reshape(T, nh * hd)
        attn = mm(attn, p + "self_attn.o_proj.weight")
        x = x + norm(attn, p + "post_attention_layernorm.weight")
        h = norm(x, p + "pre_feedforward_layernorm.weight")
        act = gelu_tanh(mm(h, p + "mlp.gate_proj.weight")) * mm(h, p + "mlp.up_proj.weight")
        x = x + norm(mm(act, p + "mlp.down_proj.weight"), p + "post_feedforward_layernorm.weight")
    x = norm(x, "model.norm.weight")
    head = "model.embed_tokens.weight" if cfg.get("tie_word_embeddings", True) else "lm_head.weight"
    logits = mm(x, head)
    if cap:
        logits = np.tanh(logits / cap) * cap
    return logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--matmul-input-bf16", action="store_true",
                    help="round each matmul input to bf16 (kvfork's declared bf16-weight numerics)")
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    ids = [int(t) for t in args.prompt_ids.split(",")]
    fwd = forward_gemma3 if cfg["architectures"][0] == "Gemma3ForCausalLM" else forward
    logits = fwd(cfg, load_weights(args.model), ids, args.matmul_input_bf16)
    logits.astype("<f8").tofile(args.out)
    print(f"logits {logits.shape} std {logits.std():.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
