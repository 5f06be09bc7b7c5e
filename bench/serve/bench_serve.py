#!/usr/bin/env python3
"""kvfork's serving benchmark (issue 7): burst, seqshare, multiturn, churn,
distinct_burst and shared_prefix workloads through the OpenAI API, on kvfork
(paged with and without tail copy, dense, prefix cache off) and on llama.cpp's
llama-server, each scenario on a fresh server process.

  /usr/bin/python3 bench/serve/bench_serve.py            # the issue's defaults
  /usr/bin/python3 bench/serve/bench_serve.py --quick    # small, for development

Writes serve.json (every number and the configuration), README.md (tables and
target checks) and PNG charts into --out, and prints the tables.
"""

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import metrics  # noqa: E402
import report  # noqa: E402
import scenarios  # noqa: E402
from servers import CONFIGS, DEFAULT_SERVERS, ServerProcess, is_paged_kvfork  # noqa: E402

# shape -> (architecture, tokenizer package under .cache/npm)
SHAPES = {
    "qwen3-0.6b": ("qwen3", "tokenizer-qwen3"),
    "llama-3.2-1b": ("llama", "tokenizer-llama3"),
    "default-50m": ("qwen3", "tokenizer-qwen3"),
    "tiny": ("qwen3", "tokenizer-qwen3"),
}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small prompts/outputs and the default-50m shape (development loop)")
    ap.add_argument("--shape", help="model shape: " + ", ".join(SHAPES) + " (default qwen3-0.6b; "
                    "default-50m with --quick)")
    ap.add_argument("--servers", default=",".join(DEFAULT_SERVERS),
                    help="comma-separated configurations (default: all but kvfork-stepoff): " + ", ".join(CONFIGS))
    ap.add_argument("--scenarios", default=",".join(scenarios.ALL),
                    help="comma-separated scenarios (default: all): " + ", ".join(scenarios.ALL))
    ap.add_argument("--threads", type=int, default=2, help="compute threads of every server (default 2)")
    ap.add_argument("--parallel", type=int, default=8,
                    help="llama.cpp slots (-np) and kvfork --max-num-seqs (default 8)")
    ap.add_argument("--max-model-len", type=int, default=0,
                    help="kvfork --max-model-len (default: the model context / --parallel, "
                         "llama.cpp's per-slot context)")
    ap.add_argument("--kv-cache-mib", type=int, default=0,
                    help="kvfork --kv-cache-mib (default: --parallel x --max-model-len tokens, "
                         "the KV llama.cpp allocates)")
    ap.add_argument("--kvfork", default=os.path.join(ROOT, "build/release/src/cli/kvfork"),
                    help="the kvfork binary (default build/release/src/cli/kvfork)")
    ap.add_argument("--llama-server", default="",
                    help="llama-server binary (default: scripts/setup-llama-server.sh builds it once)")
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "models/bench"),
                    help="where the random-weight models and their GGUF go (default models/bench)")
    ap.add_argument("--out", default="",
                    help="output directory (default bench/results; out/bench-serve-quick with --quick)")
    ap.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    ap.add_argument("--note", action="append", default=[],
                    help="a sentence for the page's notes (why a setting was chosen); repeatable")
    ap.add_argument("--render", default="",
                    help="rebuild README.md and the charts from this serve.json (no servers run); "
                         "--note adds to its notes")
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="start no new (scenario, server) run after this many minutes; what was "
                         "skipped is listed in the report (default 0 = no limit)")
    for key, value in scenarios.DEFAULTS.items():
        ap.add_argument("--" + key.replace("_", "-"), type=type(value), default=None,
                        help=f"(default {value}, --quick {scenarios.QUICK[key]})")
    a = ap.parse_args(argv)
    a.params = dict(scenarios.QUICK if a.quick else scenarios.DEFAULTS)
    for key in scenarios.DEFAULTS:
        v = getattr(a, key)
        if v is not None:
            a.params[key] = v
    a.shape = a.shape or ("default-50m" if a.quick else "qwen3-0.6b")
    if a.shape not in SHAPES:
        ap.error(f"--shape: unknown shape {a.shape!r} (known: {', '.join(SHAPES)})")
    a.servers = [s for s in a.servers.split(",") if s]
    for s in a.servers:
        if s not in CONFIGS:
            ap.error(f"--servers: unknown configuration {s!r} (known: {', '.join(CONFIGS)})")
    a.scenarios = [s for s in a.scenarios.split(",") if s]
    for s in a.scenarios:
        if s not in scenarios.ALL:
            ap.error(f"--scenarios: unknown scenario {s!r} (known: {', '.join(scenarios.ALL)})")
    if a.threads < 1 or a.parallel < 1:
        ap.error("--threads and --parallel must be >= 1")
    if a.render:
        a.out = a.out or os.path.dirname(os.path.abspath(a.render))
    a.out = a.out or os.path.join(ROOT, "out/bench-serve-quick" if a.quick else "bench/results")
    return a


def run_cmd(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench serve: {what} failed ({' '.join(cmd)}):\n{p.stderr[-2000:]}")
    return p.stdout


def prepare_model(a, need_gguf):
    """Makes the random bf16 model (and its bf16 GGUF) once; returns its description."""
    arch, tok_pkg = SHAPES[a.shape]
    d = os.path.join(a.models_dir, a.shape)
    if not os.path.exists(os.path.join(d, "config.json")):
        tok = os.path.join(ROOT, ".cache/npm", tok_pkg, "package/models")
        if not os.path.isdir(tok):
            run_cmd([os.path.join(ROOT, "scripts/install-deps.sh")], "install-deps.sh")
        print(f"bench serve: making the random {a.shape} model in {d}", flush=True)
        run_cmd([a.kvfork, "make-model", "--arch", arch, "--shape", a.shape, "--seed", "1",
                 "--dtype", "bf16", "--tokenizer", tok, "--out", d], "make-model")
    gguf = d + ".gguf"
    if need_gguf and not os.path.exists(gguf):
        print(f"bench serve: exporting {gguf}", flush=True)
        run_cmd([a.kvfork, "export-gguf", "--model", d, "--out", gguf + ".tmp", "--dtype", "bf16"],
                "export-gguf")
        os.replace(gguf + ".tmp", gguf)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_bytes_per_token = cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * head_dim * 2
    return {"dir": d, "gguf": gguf, "arch": arch, "context": cfg["max_position_embeddings"],
            "kv_bytes_per_token": kv_bytes_per_token}


def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) / (1024 * 1024)
    except OSError:
        mem = 0
    return cpu, os.cpu_count(), mem


def load_avg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def git_rev(path):
    try:
        rev = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "") if rev else "unknown"
    except OSError:
        return "unknown"


def run_cell(a, server_name, scenario, model, llama_bin, token_map, log_dir):
    log = os.path.join(log_dir, f"{scenario}.{server_name}.log")
    pool_mib = scenarios.kv_cache_mib(scenario, a.params, model["kv_bytes_per_token"], a.block_size)
    server = ServerProcess(server_name, model, a.threads, log, kvfork_bin=a.kvfork, llama_bin=llama_bin,
                           max_model_len=a.max_model_len, kv_cache_mib=pool_mib or a.kv_cache_mib,
                           parallel=a.parallel)
    try:
        server.start()
    except RuntimeError as e:
        server.stop()
        return {"scenario": scenario, "server": server_name, "requests": 1, "requests_ok": 0,
                "error_count": 1, "errors": [f"server did not start: {e}"[:2000]], "cached_tokens": 0,
                "ideal_cached_tokens": None, "ideal_floor_cached_tokens": None, "prompt_tokens": 0,
                "computed_prompt_tokens": 0, "ttft_s": [], "ttft_p50_s": None, "ttft_p95_s": None,
                "itl_p50_s": None, "output_tokens_per_s": None, "wall_s": None, "peak_rss_bytes": None,
                "last_rss_bytes": None, "per_request": []}
    except BaseException:
        server.stop()
        raise
    try:
        run = scenarios.run_scenario(scenario, server.port, a.params)
        t_end = time.monotonic()
        slot_tokens = server.llama_slot_tokens()
        notes = metrics.attach_ideal(run, server.port, token_map, a.block_size)
        stats = server.cache_stats()
        server.sampler.samples = [s for s in server.sampler.samples if s[0] <= t_end]
        cell = metrics.summarize(run, server.sampler, server_name, scenario, stats)
        cell["ideal_notes"] = notes
        cell["server_start_s"] = server.start_seconds
        cell["command"] = server.command()
        if server.kind == "kvfork":
            cell["kv_dtype"] = CONFIGS[server_name].get("kv_dtype", "bf16")
            cell["kv_cache_mib"] = pool_mib or a.kv_cache_mib
        if server.kind == "llama":
            cell["llama_kv_allocated_bytes"] = server.llama_kv_allocated_bytes()
            cell["llama_n_ctx"], cell["llama_n_ctx_seq"] = server.llama_context()
            # What the slots hold at the end: each slot keeps its own copy of
            # whatever prefix its requests had.
            cell["llama_slot_tokens"] = slot_tokens
            if slot_tokens is not None:
                cell["llama_kv_bytes_held"] = sum(slot_tokens) * model["kv_bytes_per_token"]
        return cell
    finally:
        server.stop()


def publish(cells, meta, out, with_charts):
    """Target checks, charts, serve.json and README.md into `out`; returns (page, charts)."""
    targets = report.check_targets(cells, meta)
    chart_list = report.charts(cells, meta, out) if with_charts else []
    if with_charts and not chart_list:
        meta["notes"].append("no charts: matplotlib is missing (install python3-matplotlib and run "
                             "with /usr/bin/python3)")
    with open(os.path.join(out, "serve.json"), "w") as f:
        json.dump({"meta": meta, "targets": targets, "cells": cells}, f, indent=1)
    page = report.markdown(cells, meta, targets, chart_list)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(page)
    return page, chart_list


def render(a):
    with open(a.render) as f:
        data = json.load(f)
    meta = data["meta"]
    meta["user_notes"] = meta.get("user_notes", []) + a.note
    os.makedirs(a.out, exist_ok=True)
    page, chart_list = publish(data["cells"], meta, a.out, not a.no_charts)
    print(page.split("## Charts")[0])
    return 0


def main(argv):
    a = parse_args(argv)
    if a.render:
        return render(a)
    t_start = time.monotonic()
    if not os.access(a.kvfork, os.X_OK):
        raise SystemExit(f"bench serve: no kvfork binary at {a.kvfork} (run `make build`)")
    want_llama = any(CONFIGS[s]["kind"] == "llama" for s in a.servers)
    llama_bin = a.llama_server
    if want_llama and not llama_bin:
        llama_bin = os.path.join(ROOT, run_cmd([os.path.join(ROOT, "scripts/setup-llama-server.sh")],
                                               "scripts/setup-llama-server.sh").strip().splitlines()[-1])
    model = prepare_model(a, want_llama)
    a.block_size = 16
    if a.max_model_len <= 0:
        a.max_model_len = model["context"] // a.parallel
    if a.kv_cache_mib <= 0:
        a.kv_cache_mib = math.ceil(a.parallel * a.max_model_len * model["kv_bytes_per_token"] / (1 << 20))
    # The pool a scenario sizes itself, shown in its description.
    a.params["smallpool_kv_cache_mib"] = scenarios.kv_cache_mib(
        "smallpool_burst", a.params, model["kv_bytes_per_token"], a.block_size)
    token_map = metrics.TokenMap(os.path.join(model["dir"], "tokenizer.json"))
    os.makedirs(a.out, exist_ok=True)
    log_dir = os.path.join(ROOT, "out/bench-serve-logs")
    cpu, cores, mem = machine()
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join(["bench/serve/bench_serve.py"] + argv),
        "cpu": cpu, "cores": cores, "mem_gib": mem, "load_before": load_avg(),
        "shape": a.shape, "arch": model["arch"], "kv_bytes_per_token": model["kv_bytes_per_token"],
        "threads": a.threads, "parallel": a.parallel, "max_model_len": a.max_model_len,
        "kv_cache_mib": a.kv_cache_mib, "block_size": a.block_size, "params": a.params,
        "servers": a.servers, "scenarios": a.scenarios, "quick": a.quick,
        "kvfork_commit": git_rev(ROOT),
        "llama_commit": git_rev(os.path.join(ROOT, ".cache/llama.cpp")) if want_llama else None,
        "notes": [], "user_notes": a.note,
    }
    cells = []
    meta["skipped"] = []
    meta["pool_skipped"] = []

    def write(final):
        meta["load_after"] = load_avg()
        meta["total_s"] = time.monotonic() - t_start
        meta["notes"] = sorted({f"{c['scenario']} on {c['server']}: {n}"
                                for c in cells for n in c.get("ideal_notes") or []})
        if meta["pool_skipped"]:
            meta["notes"].append("not run (the scenario sizes kvfork's shared KV pool, which only the "
                                 "paged backend has): " + ", ".join(meta["pool_skipped"]))
        if meta["skipped"]:
            meta["notes"].append(f"not run (--max-minutes {a.max_minutes:g}): " + ", ".join(meta["skipped"]))
        return publish(cells, meta, a.out, final and not a.no_charts)

    # Scenario-major, so every server of a scenario runs under similar load.
    # The page is rewritten after every cell, so a run cut short keeps what it measured.
    for sc in a.scenarios:
        for s in a.servers:
            if sc in scenarios.POOL_SCENARIOS and not is_paged_kvfork(s):
                meta["pool_skipped"].append(f"{sc} on {s}")
                continue
            if a.max_minutes and time.monotonic() - t_start > a.max_minutes * 60:
                meta["skipped"].append(f"{sc} on {s}")
                continue
            t0 = time.monotonic()
            print(f"bench serve: {sc} on {s} ...", end="", flush=True)
            cell = run_cell(a, s, sc, model, llama_bin, token_map, log_dir)
            cells.append(cell)
            print(f" {time.monotonic() - t0:.1f} s, {cell['requests_ok']}/{cell['requests']} ok, cached "
                  f"{cell['cached_tokens']}/{cell['ideal_cached_tokens']}, TTFT p50 "
                  f"{report.fmt(cell['ttft_p50_s'], 1e3, 0)} ms, load {load_avg()}"
                  + (f", first error: {cell['errors'][0][:300]}" if cell["error_count"] else ""), flush=True)
            write(final=False)
    page, chart_list = write(final=True)
    print()
    print(page.split("## Charts")[0].split("## Definitions")[0])
    print(f"bench serve: wrote {a.out}/serve.json, README.md"
          + (", " + ", ".join(os.path.basename(p) for _, p in chart_list) if chart_list else ""))
    return 1 if any(c["error_count"] for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
