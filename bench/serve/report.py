"""Turns the cells of a run into the issue's target checks, a Markdown page and PNG charts."""

import os

from scenarios import DESCRIPTIONS
from servers import CONFIGS

MIB = 1024.0 * 1024.0
PAGED, NOTAIL, LLAMA, LLAMA_BEST = "kvfork-paged", "kvfork-notail", "llama.cpp", "llama.cpp-best"
# The llama.cpp configurations a target is checked against, with the name
# the table uses: its defaults, and its prefix-sharing features on.
PEERS = ((LLAMA, "llama.cpp"), (LLAMA_BEST, "llama.cpp best"))


def cell_of(cells, scenario, server):
    for c in cells:
        if c["scenario"] == scenario and c["server"] == server:
            return c
    return None


def fmt(v, scale=1.0, digits=1, unit=""):
    if v is None:
        return "–"
    return f"{v * scale:,.{digits}f}{unit}"


def check_targets(cells, meta):
    """One row per target of issue 7: what was measured and whether it holds."""
    rows = []
    bs = meta["block_size"]
    for sc in ("burst", "seqshare", "multiturn"):
        c = cell_of(cells, sc, PAGED)
        if c and c["ideal_cached_tokens"]:
            ratio = c["cached_tokens"] / c["ideal_cached_tokens"]
            rows.append({"target": f"{sc}: cached >= 99% of ideal (tail copy on)",
                         "measured": f"{c['cached_tokens']} / {c['ideal_cached_tokens']} = {ratio:.1%}",
                         "ok": ratio >= 0.99})
        c = cell_of(cells, sc, NOTAIL)
        if c and c["ideal_floor_cached_tokens"] is not None:
            devs = [abs((r["cached_tokens"] or 0) - r["ideal_floor"]) for r in c["per_request"]
                    if r["ideal_floor"] is not None]
            worst = max(devs, default=0)
            rows.append({"target": f"{sc}: tail copy off within one block ({bs}) per request of floored ideal",
                         "measured": f"cached {c['cached_tokens']}, floored ideal "
                                     f"{c['ideal_floor_cached_tokens']}, worst request off by {worst}",
                         "ok": worst <= bs})
    c = cell_of(cells, "burst", PAGED)
    if c and c.get("peak_kv_bytes_server") is not None and c["per_request"]:
        reqs = c["per_request"]
        measured = [r for r in reqs if r["phase"] == "measured"]
        prefix = min((r["ideal"] or 0) for r in measured) if measured else 0
        tokens = prefix + sum((r["prompt_tokens"] or 0) - prefix + (r["completion_tokens"] or 0) for r in reqs)
        bound = 1.1 * tokens * meta["kv_bytes_per_token"]
        peak = c["peak_kv_bytes_server"]
        rows.append({"target": "burst: peak KV bytes <= 1.1 x (prefix + suffixes + outputs) x bytes/token",
                     "measured": f"peak {peak / MIB:.2f} MiB vs bound {bound / MIB:.2f} MiB "
                                 f"({prefix} shared prefix tokens, {tokens} tokens in all incl. the warm-up)",
                     "ok": peak <= bound})
        ll = cell_of(cells, "burst", LLAMA)
        if ll and ll.get("llama_kv_allocated_bytes"):
            held = ll.get("llama_slot_tokens")
            copies = (f"its {len(held)} slots hold {sum(held):,} tokens at the end "
                      f"({sum(held) * meta['kv_bytes_per_token'] / MIB:.1f} MiB, "
                      f"{sum(1 for t in held if t >= prefix)} slots with a full copy of the "
                      f"{prefix}-token prefix); " if held else "")
            rows.append({"target": "burst: llama.cpp holds a copy per slot",
                         "measured": f"llama.cpp: {copies}KV buffer {ll['llama_kv_allocated_bytes'] / MIB:.0f} MiB "
                                     f"allocated; its requests computed {ll['computed_prompt_tokens']:,} prompt "
                                     f"tokens vs kvfork's {c['computed_prompt_tokens']:,}",
                         "ok": None})
    for peer, peer_name in PEERS:
        for sc in ("burst", "seqshare"):
            k, ll = cell_of(cells, sc, PAGED), cell_of(cells, sc, peer)
            if k and ll and k["ttft_p50_s"] and ll["ttft_p50_s"]:
                x = ll["ttft_p50_s"] / k["ttft_p50_s"]
                rows.append({"target": f"{sc}: TTFT p50 >= 5x lower than {peer_name}",
                             "measured": f"kvfork {k['ttft_p50_s'] * 1e3:.0f} ms, {peer_name} "
                                         f"{ll['ttft_p50_s'] * 1e3:.0f} ms: {x:.1f}x", "ok": x >= 5})
            if k and ll and k["output_tokens_per_s"] and ll["output_tokens_per_s"]:
                x = k["output_tokens_per_s"] / ll["output_tokens_per_s"]
                rows.append({"target": f"{sc}: aggregate output tokens/s >= {peer_name}",
                             "measured": f"kvfork {k['output_tokens_per_s']:.1f}, {peer_name} "
                                         f"{ll['output_tokens_per_s']:.1f}: {x:.2f}x", "ok": x >= 1})
        # Issue 21: decodes keep their pace while new prompts prefill
        # (--max-step-ms), and the time to first token stays well ahead.
        k, ll = cell_of(cells, "distinct_burst", PAGED), cell_of(cells, "distinct_burst", peer)
        if k and ll and k.get("itl_p50_s") and ll.get("itl_p50_s"):
            rows.append({"target": f"distinct_burst: ITL p50 <= {peer_name}'s",
                         "measured": f"kvfork {k['itl_p50_s'] * 1e3:.0f} ms, {peer_name} "
                                     f"{ll['itl_p50_s'] * 1e3:.0f} ms",
                         "ok": k["itl_p50_s"] <= ll["itl_p50_s"]})
        if k and ll and k["ttft_p50_s"] and ll["ttft_p50_s"]:
            x = ll["ttft_p50_s"] / k["ttft_p50_s"]
            rows.append({"target": f"distinct_burst: TTFT p50 >= 2x lower than {peer_name}",
                         "measured": f"kvfork {k['ttft_p50_s'] * 1e3:.0f} ms, {peer_name} "
                                     f"{ll['ttft_p50_s'] * 1e3:.0f} ms: {x:.1f}x", "ok": x >= 2})
    rows += smallpool_targets(cells)
    lost = sum(c["requests"] - c["requests_ok"] for c in cells)
    total = sum(c["requests"] for c in cells)
    rows.append({"target": "no scenario loses a request or returns an error",
                 "measured": f"{total - lost} of {total} requests ok", "ok": lost == 0})
    return rows


def hit_rate(c):
    """Cached / ideal tokens of the measured phase, or None."""
    ideal = c.get("measured_ideal_cached_tokens")
    return c["measured_cached_tokens"] / ideal if ideal else None


def smallpool_targets(cells):
    """Issue 26: in a pool too small for bf16 KV to hold every system prompt, a
    smaller KV format keeps the hit rate. Each quantized configuration against
    kvfork-paged (bf16) over the rounds after the cold one; a target (95% of
    ideal) for the 4-bit formats, the others as measured."""
    rows = []
    base = cell_of(cells, "smallpool_burst", PAGED)
    if not base or hit_rate(base) is None:
        return rows
    for c in cells:
        dtype = CONFIGS.get(c["server"], {}).get("kv_dtype")
        if c["scenario"] != "smallpool_burst" or not dtype or hit_rate(c) is None:
            continue
        four_bit = dtype.startswith("q4")
        ttft = ""
        if base["ttft_p50_s"] and c["ttft_p50_s"]:
            ttft = f"; TTFT p50 {base['ttft_p50_s'] * 1e3:.0f} ms vs {c['ttft_p50_s'] * 1e3:.0f} ms"
        rows.append({"target": f"smallpool_burst: KV {dtype} keeps the hit rate bf16 loses in "
                               f"{c.get('kv_cache_mib', '?')} MiB" + (" (>= 95% of ideal)" if four_bit else ""),
                     "measured": f"hit rate after the cold round: bf16 {hit_rate(base):.1%} "
                                 f"({base['measured_cached_tokens']:,} / {base['measured_ideal_cached_tokens']:,}), "
                                 f"{dtype} {hit_rate(c):.1%} ({c['measured_cached_tokens']:,} / "
                                 f"{c['measured_ideal_cached_tokens']:,}){ttft}",
                     "ok": hit_rate(c) >= 0.95 if four_bit else None})
    return rows


def markdown(cells, meta, targets, charts):
    servers = [s for s in meta["servers"]]
    out = [f"# Serving benchmark: latest run ({meta['date']})", "",
           "Written by `bench/serve/bench_serve.py` (see [Reproduce](#reproduce)); the numbers "
           "below are from one run on the machine described here, nothing is edited by hand.", "",
           f"- command: `{meta['command']}`",
           f"- machine: {meta['cpu']}, {meta['cores']} cores, {meta['mem_gib']:.0f} GiB; "
           f"load average {meta['load_before']} before, {meta['load_after']} after "
           "(the server under test keeps it near its thread count; more than that before the "
           f"run means other jobs shared the {meta['cores']} cores)",
           f"- model: random bf16 weights, shape `{meta['shape']}` ({meta['arch']}), "
           f"{meta['kv_bytes_per_token']} KV bytes per token; llama.cpp runs the same weights "
           f"exported to GGUF bf16 by `kvfork export-gguf`",
           f"- threads: {meta['threads']} for every server; kvfork `--max-model-len "
           f"{meta['max_model_len']} --kv-cache-mib {meta['kv_cache_mib']}` (llama.cpp's per-slot "
           f"context and KV size); llama.cpp `-np {meta['parallel']} -c {meta['parallel'] * meta['max_model_len']}` "
           "and defaults otherwise (`cache_prompt` on, `--cache-ram` 8192 MiB); llama.cpp best adds "
           "`--kv-unified --cache-idle-slots --cache-reuse 256 --cache-ram 8192` (its own prefix-sharing "
           "features); kvfork runs with its defaults (`--max-step-ms auto`)",
           f"- kvfork {meta['kvfork_commit']}; llama.cpp {meta['llama_commit']}",
           f"- total time {meta['total_s'] / 60:.1f} min", ""]
    if meta.get("user_notes"):
        out += ["Notes given with `--note`:", ""] + [f"- {n}" for n in meta["user_notes"]] + [""]
    if meta.get("notes"):
        out += ["Notes:", ""] + [f"- {n}" for n in meta["notes"]] + [""]
    out += ["## Targets (issues 7, 21 and 26)", "", "| target | measured | holds |", "|---|---|---|"]
    for t in targets:
        verdict = "–" if t["ok"] is None else ("yes" if t["ok"] else "**no**")
        out.append(f"| {t['target']} | {t['measured']} | {verdict} |")
    out += ["", "## Results", ""]
    head = ("| server | ok | cached / ideal tokens | prompt tokens computed | TTFT p50 / p95 (ms) | "
            "ITL p50 (ms) | output tok/s | wall (s) | peak / last RSS (MiB) | peak KV (MiB) |")
    for sc in meta["scenarios"]:
        rows = [cell_of(cells, sc, s) for s in servers]
        rows = [r for r in rows if r]
        if not rows:
            continue
        out += [f"### {sc}", "", DESCRIPTIONS[sc].format(**meta["params"]) + ".", "", head,
                "|---|---|---|---|---|---|---|---|---|---|"]
        for c in rows:
            ideal = c["ideal_cached_tokens"]
            cached = f"{c['cached_tokens']:,} / {ideal:,}" if ideal is not None else f"{c['cached_tokens']:,} / –"
            if c["server"] == LLAMA:
                kv_s = (f"{fmt(c.get('llama_kv_bytes_held'), 1 / MIB, 0)} held at end / "
                        f"{fmt(c.get('llama_kv_allocated_bytes'), 1 / MIB, 0)} allocated")
            else:
                kv_s = fmt(c.get("peak_kv_bytes_server"), 1 / MIB, 0)
            out.append(
                f"| {CONFIGS[c['server']]['label']} | {c['requests_ok']}/{c['requests']} | {cached} | "
                f"{c['computed_prompt_tokens']:,} | {fmt(c['ttft_p50_s'], 1e3, 0)} / "
                f"{fmt(c['ttft_p95_s'], 1e3, 0)} | {fmt(c['itl_p50_s'], 1e3, 1)} | "
                f"{fmt(c['output_tokens_per_s'], 1, 1)} | {fmt(c['wall_s'], 1, 1)} | "
                f"{fmt(c['peak_rss_bytes'], 1 / MIB, 0)} / {fmt(c['last_rss_bytes'], 1 / MIB, 0)} | {kv_s} |")
            if c["error_count"]:
                out.append(f"| ↳ {c['error_count']} errors, first: {c['errors'][0][:200]} |||||||||| ")
        out.append("")
    if charts:
        out += ["## Charts", ""] + [f"![{name}]({os.path.basename(path)})" for name, path in charts] + [""]
    out += ["## Definitions", "",
            "- **cached**: sum of `usage.prompt_tokens_details.cached_tokens` over every request of the "
            "scenario (warm-ups included). **ideal**: what an exact token-level prefix cache could reuse: "
            "per request, the longest common prefix of its prompt tokens with any request sent before it "
            "(its prompt plus its generated tokens but the last), at most prompt - 1. Prompt tokens come "
            "from each server's own `/apply-template` + `/tokenize`; multiturn asks for logprobs to learn "
            "the generated token ids. Concurrent requests count as sent in order, so for `shared_prefix` "
            "and `distinct_burst` the ideal assumes a request can wait for a sibling's prefix.",
            "- **prompt tokens computed**: prompt tokens - cached tokens.",
            "- **TTFT**: request sent to the first chunk with generated text; **ITL**: gaps between text "
            "chunks; both over the measured phase (warm-up excluded). **output tok/s**: completion tokens "
            "of the measured phase / its wall time.",
            "- **RSS**: `/proc/PID/status` VmRSS sampled every 100 ms from start to stop (peak includes "
            "VmHWM). **peak KV**: kvfork's `kv_bytes_peak` (blocks used or cached, whole process life); "
            "for llama.cpp the tokens its slots hold at the end (`/slots` n_prompt_tokens x KV bytes per "
            "token) and the KV buffer its log reports, allocated whole at start.",
            "", "## Reproduce", "", "```sh", "make bench-serve            # this page (the issue's defaults)",
            "make bench-serve ARGS=--quick   # a small run while developing (writes out/bench-serve-quick)",
            "/usr/bin/python3 bench/serve/bench_serve.py --help", "```", ""]
    return "\n".join(out)


def charts(cells, meta, out_dir):
    """Writes the PNG charts; returns [(title, path)] or [] without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    servers = meta["servers"]
    scen = [s for s in meta["scenarios"] if s != "idle"]
    colors = {"kvfork-paged": "#1f77b4", "kvfork-notail": "#6baed6", "kvfork-dense": "#9467bd",
              "kvfork-noprefix": "#bcbddc", "kvfork-int8": "#2ca02c", "llama.cpp": "#d62728"}
    width = 0.8 / max(1, len(servers))
    made = []

    def bars(values_of, title, ylabel, path, ideal=False, scenarios=scen):
        fig, ax = plt.subplots(figsize=(9, 3.6), dpi=80)
        for i, s in enumerate(servers):
            xs, ys = [], []
            for j, sc in enumerate(scenarios):
                c = cell_of(cells, sc, s)
                v = values_of(c) if c else None
                if v is not None:
                    xs.append(j + (i - (len(servers) - 1) / 2) * width)
                    ys.append(v)
            ax.bar(xs, ys, width, label=CONFIGS[s]["label"], color=colors.get(s))
        if ideal:
            for j, sc in enumerate(scenarios):
                c = cell_of(cells, sc, "kvfork-paged") or next(
                    (cell_of(cells, sc, s) for s in servers if cell_of(cells, sc, s)), None)
                if c and c["ideal_cached_tokens"] is not None:
                    ax.hlines(c["ideal_cached_tokens"], j - 0.45, j + 0.45, colors="k", linestyles="--",
                              label="ideal (kvfork's replies)" if j == 0 else None)
        ax.set_xticks(range(len(scenarios)))
        ax.set_xticklabels(scenarios)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        made.append((title, path))

    bars(lambda c: c["cached_tokens"], "Cached prompt tokens by scenario and server", "tokens",
         os.path.join(out_dir, "serve_cached_tokens.png"), ideal=True)
    bars(lambda c: c["peak_rss_bytes"] / MIB if c["peak_rss_bytes"] else None,
         "Peak RSS by scenario and server", "MiB", os.path.join(out_dir, "serve_peak_rss.png"),
         scenarios=meta["scenarios"])
    # TTFT distribution: one box per server for each scenario.
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=80)
    for i, s in enumerate(servers):
        data, pos = [], []
        for j, sc in enumerate(scen):
            c = cell_of(cells, sc, s)
            if c and c["ttft_s"]:
                data.append([x * 1e3 for x in c["ttft_s"]])
                pos.append(j + (i - (len(servers) - 1) / 2) * width)
        if data:
            b = ax.boxplot(data, positions=pos, widths=width * 0.9, patch_artist=True, showfliers=True,
                           flierprops={"markersize": 2})
            for patch in b["boxes"]:
                patch.set_facecolor(colors.get(s))
            ax.plot([], [], color=colors.get(s), lw=6, label=CONFIGS[s]["label"])
    ax.set_yscale("log")
    ax.set_xticks(range(len(scen)))
    ax.set_xticklabels(scen)
    ax.set_ylabel("TTFT (ms, log)")
    ax.set_title("Time to first token, measured requests")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out_dir, "serve_ttft.png")
    fig.savefig(path)
    plt.close(fig)
    made.append(("Time to first token", path))
    return made
