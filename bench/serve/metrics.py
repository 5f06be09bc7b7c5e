"""Per-scenario numbers: cached vs ideal tokens, latencies, throughput, memory.

The ideal reusable count of request i is what an exact token-level prefix
cache could have reused: the longest common prefix of its prompt tokens with
any request sent before it (that request's prompt, plus its generated tokens
but the last, which never enters the KV cache), capped at prompt - 1 because
the last prompt token is always computed. Prompt token ids come from the
server under test's own /apply-template and /tokenize; generated token ids
(multiturn only) from the logprobs: the id where the server names it
(llama.cpp), else the token's bytes mapped through tokenizer.json (kvfork).
"""

import json
import math

from servers import http_json


def percentile(values, q):
    """Linear-interpolated percentile (q in [0, 100]) or None for no values."""
    v = sorted(values)
    if not v:
        return None
    k = (len(v) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: byte -> the character BPE vocabularies use for it."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


class TokenMap:
    """Token bytes -> id, from a byte-level BPE tokenizer.json."""

    def __init__(self, tokenizer_json):
        with open(tokenizer_json) as f:
            tok = json.load(f)
        self.vocab = tok["model"]["vocab"]
        self.added = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
        self.enc = bytes_to_unicode()

    def id_of(self, raw):
        key = "".join(self.enc[b] for b in raw)
        if key in self.vocab:
            return self.vocab[key]
        return self.added.get(raw.decode("utf-8", "replace"))


def lcp(a, b):
    """Length of the common prefix of two token lists (binary search on C-speed slices)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prompt_ids(port, messages, prompt_tokens):
    """The prompt's token ids as the server renders and tokenizes it.

    Returns (ids, note); note says when no tokenization matched the count the
    server reported in usage.prompt_tokens.
    """
    code, t = http_json(port, "POST", "/apply-template", {"messages": messages})
    if code != 200 or "prompt" not in t:
        return None, f"/apply-template answered {code}"
    best = None
    for add_special in (False, True):
        code, k = http_json(port, "POST", "/tokenize", {"content": t["prompt"], "add_special": add_special})
        if code != 200:
            return None, f"/tokenize answered {code}"
        ids = [x if isinstance(x, int) else x["id"] for x in k["tokens"]]
        if prompt_tokens is None or len(ids) == prompt_tokens:
            return ids, None
        best = ids
    return best, f"tokenized {len(best)} tokens, usage says {prompt_tokens}"


def attach_ideal(run, port, token_map, block_size):
    """Adds ideal / floored-ideal reusable tokens to every request of the run."""
    notes = []
    sent = sorted(run.requests, key=lambda e: e["result"]["t_send"])
    history = []  # token sequences of earlier requests as a cache could hold them
    for e in sent:
        r = e["result"]
        usage = r.get("usage") or {}
        ids, note = prompt_ids(port, e["messages"], usage.get("prompt_tokens"))
        if note:
            notes.append(note)
        if ids is None:
            e["ideal"] = e["ideal_floor"] = None
            continue
        best = max((lcp(ids, h) for h in history), default=0)
        e["ideal"] = max(0, min(best, len(ids) - 1))
        e["ideal_floor"] = e["ideal"] // block_size * block_size
        seq = list(ids)
        if r.get("token_bytes"):
            named = r.get("token_ids") or [None] * len(r["token_bytes"])
            gen = [i if i is not None else token_map.id_of(b) for i, b in zip(named, r["token_bytes"])]
            if None not in gen:
                seq += gen[:-1]
            else:
                notes.append("a generated token's bytes matched no vocabulary entry")
        history.append(seq)
    return sorted(set(notes))


def summarize(run, sampler, server, scenario, cache_stats_end):
    """The numbers of one (scenario, server) cell."""
    measured = [e for e in run.requests if e["phase"] == "measured"]
    everything = run.requests
    ok = [e for e in everything if e["result"]["ok"]]
    errors = [e["result"]["error"] for e in everything if not e["result"]["ok"]]

    def usage_sum(entries, key, sub=None):
        total = 0
        for e in entries:
            u = e["result"].get("usage") or {}
            v = (u.get(sub) or {}).get(key, 0) if sub else u.get(key, 0)
            total += v or 0
        return total

    t0, t1 = run.phases.get("measured", (None, None))
    wall = (t1 - t0) if t0 is not None else None
    ttfts = [e["result"]["ttft"] for e in measured if e["result"]["ttft"] is not None]
    itls = [x for e in measured for x in e["result"]["itl"]]
    out_tokens = usage_sum(measured, "completion_tokens")
    ideal = [e.get("ideal") for e in everything]
    ideal_known = all(x is not None for x in ideal)
    samples = sampler.samples
    window = sampler.window(t0, t1) if t0 is not None else samples
    kv_held = [s[4] for s in samples if s[4] is not None]
    kv_window = [s[4] for s in window if s[4] is not None]
    cell = {
        "scenario": scenario, "server": server,
        "requests": len(everything), "requests_ok": len(ok), "errors": errors[:5],
        "error_count": len(errors),
        "prompt_tokens": usage_sum(everything, "prompt_tokens"),
        "cached_tokens": usage_sum(everything, "cached_tokens", "prompt_tokens_details"),
        "ideal_cached_tokens": sum(ideal) if ideal_known and everything else (0 if not everything else None),
        "ideal_floor_cached_tokens": sum(e["ideal_floor"] for e in everything) if ideal_known else None,
        "output_tokens": usage_sum(everything, "completion_tokens"),
        "measured_output_tokens": out_tokens,
        # The hit rate once a scenario's warm-up is done (smallpool_burst's later rounds).
        "measured_cached_tokens": usage_sum(measured, "cached_tokens", "prompt_tokens_details"),
        "measured_ideal_cached_tokens": sum(e["ideal"] for e in measured) if ideal_known else None,
        "ttft_p50_s": percentile(ttfts, 50), "ttft_p95_s": percentile(ttfts, 95),
        "ttft_s": ttfts,
        "itl_p50_s": percentile(itls, 50),
        "output_tokens_per_s": out_tokens / wall if wall and out_tokens else None,
        "wall_s": wall,
        "scenario_wall_s": (max(p[1] for p in run.phases.values()) - min(p[0] for p in run.phases.values()))
        if run.phases else None,
        "peak_rss_bytes": max([s[1] for s in samples] + [s[2] for s in samples[-1:]], default=None),
        "last_rss_bytes": samples[-1][1] if samples else None,
        "peak_kv_bytes": max(kv_held) if kv_held else None,
        "peak_kv_bytes_measured_phase": max(kv_window) if kv_window else None,
        "rss_samples": len(samples),
    }
    cell["computed_prompt_tokens"] = cell["prompt_tokens"] - cell["cached_tokens"]
    if cache_stats_end:
        cell["kvfork_cache_stats"] = cache_stats_end
        cell["peak_kv_bytes_server"] = cache_stats_end.get("kv_bytes_peak")
    # Per request: cached vs ideal, for the "one block per request" target.
    cell["per_request"] = [{
        "phase": e["phase"],
        "prompt_tokens": (e["result"].get("usage") or {}).get("prompt_tokens"),
        "cached_tokens": ((e["result"].get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens"),
        "ideal": e.get("ideal"), "ideal_floor": e.get("ideal_floor"),
        "completion_tokens": (e["result"].get("usage") or {}).get("completion_tokens"),
        "ttft_s": e["result"]["ttft"], "e2e_s": e["result"]["e2e"], "error": e["result"]["error"],
    } for e in sorted(everything, key=lambda e: e["result"]["t_send"])]
    return cell
