#!/usr/bin/env python3
"""The restart benchmark of the serving benchmark (issue 25 section 3): does the
disk tier (--kv-disk-dir) keep a conversation's prefix across a server restart,
and where does reading a block back beat recomputing it on this machine?

One conversation (a long first message of --context-tokens words, then short
turns with the replies appended) runs on a fresh server in each variant, and
its next turn is timed:

  warm         the same server answers the next turn (no restart)
  restart      SIGTERM (clean stop: every cached block is written), a new
               server on the same --kv-disk-dir, the next turn once /health
               answers (and after --warmup's request), as a user sends it:
               the server's preload at start (--kv-disk-preload-gib, on by
               default) may still be reading then; the row records whether
               it was, and how long the preload took from the cache's creation
  restart-preloaded  the same restart, the next turn sent once the server
               says its preload has ended (/v1/cache/stats disk.
               preload_running false): the user who comes back later. The
               wait is the cost: the row records the seconds from the
               server's start to /health and to the preload's end
  restart-nopreload  the same with --kv-disk-preload-gib 0: every block is
               read when the turn asks for it
  kill9        the pool is one sequence long and a filler prompt of about its
               size evicts the conversation, so its blocks are written on
               eviction; once the tier's counters stop moving for
               --settle-seconds ("the disk writes settle") the server gets
               SIGKILL, a new server starts on the directory, the next turn.
               Blocks only ever in RAM are lost to kill -9: without the filler
               nothing would be on disk.
  cold         a fresh server on an empty directory gets the next turn's whole
               prompt (the prefill a restart without a disk tier pays)
  llama.cpp    llama-server --slot-save-path: the conversation, POST
               /slots/0?action=save, SIGTERM, a new llama-server, POST
               /slots/0?action=restore, the next turn (skipped with a message
               when .cache/llama-server is not built)

Break-even: the block files are read back by this script (each file's page
cache dropped first with posix_fadvise DONTNEED, then again from the page
cache), and set against the prefill rate the cold variant measured.

  /usr/bin/python3 bench/serve/bench_restart.py                 # 2k context
  /usr/bin/python3 bench/serve/bench_restart.py --context-tokens 16384  # the issue's shape

Prints a table and writes restart.json into --out (default bench/results).
"""

import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bench_serve  # noqa: E402
import scenarios  # noqa: E402
from client import chat_body, stream_chat  # noqa: E402
from servers import ServerProcess, http_json  # noqa: E402

BLOCK_TOKENS = 16
VARIANTS = ["warm", "restart", "restart-preloaded", "restart-nopreload", "kill9", "cold", "llama.cpp"]
# SIGTERM, then a new server on the same directory.
CLEAN_RESTARTS = ("restart", "restart-preloaded", "restart-nopreload")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen3-0.6b", help="model shape: " + ", ".join(bench_serve.SHAPES)
                    + " (default qwen3-0.6b)")
    ap.add_argument("--context-tokens", type=int, default=2048,
                    help="words (about tokens) of the conversation's first message (default 2048; the "
                         "issue's target is 16384)")
    ap.add_argument("--turns", type=int, default=3, help="turns before the timed one (default 3)")
    ap.add_argument("--user-words", type=int, default=48, help="words of each later user turn (default 48)")
    ap.add_argument("--max-tokens", type=int, default=16, help="output tokens of each turn (default 16)")
    ap.add_argument("--threads", type=int, default=2, help="compute threads of every server (default 2)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated variants (default all): " + ", ".join(VARIANTS))
    ap.add_argument("--kv-dtype", default="bf16",
                    help="--kv-dtype of every kvfork server (default bf16; int8, q4, ...: the disk "
                         "tier's files then hold that format)")
    ap.add_argument("--settle-seconds", type=float, default=1.0,
                    help="kill9: the disk counters must stand still this long before SIGKILL (default 1)")
    ap.add_argument("--warmup", action="store_true",
                    help="one short unrelated request on every new server before the timed turn (the "
                         "warm server has had the conversation's turns)")
    ap.add_argument("--kvfork", default=os.path.join(ROOT, "build/release/src/cli/kvfork"))
    ap.add_argument("--llama-server", default=os.path.join(ROOT, ".cache/llama-server/build/bin/llama-server"),
                    help="llama-server binary (default .cache/llama-server/build/bin/llama-server; "
                         "scripts/setup-llama-server.sh builds it)")
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "models/bench"))
    ap.add_argument("--work-dir", default="", help="where the disk tiers and slot files go (default: a "
                    "temporary directory under out/, deleted at the end)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results"))
    ap.add_argument("--log-dir", default=os.path.join(ROOT, "out/bench-serve-logs"),
                    help="the servers' logs, restart.VARIANT.{1,2}.log (default out/bench-serve-logs)")
    ap.add_argument("--note", action="append", default=[], help="a sentence for the JSON's notes")
    a = ap.parse_args(argv)
    if a.shape not in bench_serve.SHAPES:
        ap.error(f"--shape: unknown shape {a.shape!r} (known: {', '.join(bench_serve.SHAPES)})")
    a.variants = [v for v in a.variants.split(",") if v]
    for v in a.variants:
        if v not in VARIANTS:
            ap.error(f"--variants: unknown variant {v!r} (known: {', '.join(VARIANTS)})")
    if a.context_tokens < BLOCK_TOKENS or a.turns < 1 or a.max_tokens < 1 or a.user_words < 1:
        ap.error("--context-tokens must be >= 16 and --turns, --max-tokens, --user-words >= 1")
    return a


class Conversation:
    """The deterministic conversation: the same text on every server; the
    replies appended are each server's own."""

    def __init__(self, a):
        rng = scenarios.random.Random(25)
        self.first = scenarios.text_of_words(rng, a.context_tokens)
        self.users = [scenarios.text_of_words(rng, a.user_words) for _ in range(a.turns)]
        self.max_tokens = a.max_tokens
        self.messages = []

    def history(self, port):
        """Runs every turn before the timed one; returns their results."""
        self.messages = []
        results = []
        for i in range(len(self.users)):
            content = (self.first + "\n\n" + self.users[0]) if i == 0 else self.users[i]
            self.messages.append({"role": "user", "content": content})
            r = stream_chat(port, chat_body(list(self.messages), self.max_tokens))
            if not r["ok"]:
                raise RuntimeError(f"history turn {i + 1} failed: {r['error']}")
            self.messages.append({"role": "assistant", "content": r["text"]})
            results.append(r)
        return results

    def next_turn_messages(self):
        return self.messages + [{"role": "user", "content": "And now, in one sentence: what came first?"}]


class Server(ServerProcess):
    """A ServerProcess with extra flags (the disk tier, the pool, the slot path)."""

    def __init__(self, config, model, a, log, extra, max_model_len):
        super().__init__(config, model, a.threads, log, kvfork_bin=a.kvfork, llama_bin=a.llama_server,
                         max_model_len=max_model_len, parallel=1)
        self.extra = list(extra)

    def command(self):
        return super().command() + self.extra

    def start(self, timeout=900.0):
        self.spawned_at = time.monotonic()  # start_seconds counts from here too
        super().start(timeout)

    def kill9(self):
        self.sampler.stop()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()

    def disk(self):
        code, s = http_json(self.port, "GET", "/v1/cache/stats")
        if code != 200 or "disk" not in s:
            raise RuntimeError(f"/v1/cache/stats has no disk object: {code} {s}")
        return s["disk"]


def warm_up(port, a, row):
    """--warmup: one short unrelated request on a new server before the timed
    turn, so the timed turn does not also pay the first request's one-time
    costs (weight pages, scratch buffers); its prefix shares no full block."""
    if not a.warmup:
        return
    r = stream_chat(port, chat_body([{"role": "user", "content": "Hello."}], 1))
    if not r["ok"]:
        raise RuntimeError(f"warm-up request failed: {r['error']}")
    row["warmup_ttft_s"] = r["ttft"]


def wait_preload_end(server, poll_s=0.02, timeout=600.0):
    """restart-preloaded: polls the stats until the server's preload at start
    has ended; returns the seconds from the server's spawn to the poll that
    saw it (at most poll_s late)."""
    while True:
        d = server.disk()
        if "preload_running" not in d:
            raise RuntimeError(f"/v1/cache/stats disk has no preload_running: {d}")
        now = time.monotonic()
        if not d["preload_running"]:
            return now - server.spawned_at
        if now - server.spawned_at > timeout:
            raise RuntimeError(f"the preload at start still ran {timeout:.0f} s after the server's start")
        time.sleep(poll_s)


def timed_next_turn(port, conv):
    r = stream_chat(port, chat_body(conv.next_turn_messages(), conv.max_tokens))
    if not r["ok"]:
        raise RuntimeError(f"next turn failed: {r['error']}")
    u = r["usage"]
    return {"ttft_s": r["ttft"], "prompt_tokens": u["prompt_tokens"],
            "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens"), "text": r["text"]}


def wait_settled(server, settle_s, timeout=300.0):
    """Waits until the tier's written and dropped counters stand still for settle_s."""
    t0 = time.monotonic()
    last, since = None, time.monotonic()
    while time.monotonic() - t0 < timeout:
        d = server.disk()
        key = (d["blocks_written"], d["writes_dropped"], d["write_errors"], d["blocks"])
        if key != last:
            last, since = key, time.monotonic()
        elif time.monotonic() - since >= settle_s:
            return d, time.monotonic() - t0
        time.sleep(0.1)
    raise RuntimeError(f"disk writes did not settle in {timeout:.0f} s")


def block_files(disk_dir):
    out = []
    for root, _, files in os.walk(disk_dir):
        out += [os.path.join(root, f) for f in files if f.endswith((".kvb", ".kvp"))]
    return sorted(out)


def read_rates(paths):
    """Reads every block file twice: after dropping its page cache (DONTNEED;
    the storage's read rate where the kernel honours it) and from the page
    cache. Returns bytes, per-block latency and bytes/s of each pass."""
    def one_pass(drop):
        lat, total = [], 0
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            try:
                if drop:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                t = time.perf_counter()
                n = 0
                while True:
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        break
                    n += len(chunk)
                lat.append(time.perf_counter() - t)
                total += n
            finally:
                os.close(fd)
        s = sum(lat)
        return {"blocks": len(paths), "bytes": total, "seconds": s,
                "bytes_per_s": total / s if s > 0 else None,
                "block_latency_p50_s": statistics.median(lat) if lat else None,
                "block_latency_max_s": max(lat) if lat else None}
    if not paths:
        return None
    return {"dropped_cache": one_pass(True), "page_cache": one_pass(False)}


def fs_type(path):
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return "unknown"
    real = os.path.realpath(path)
    best = max((m for m in mounts if real == m[1] or real.startswith(m[1].rstrip("/") + "/")),
               key=lambda m: len(m[1]), default=None)
    return f"{best[2]} ({best[1]})" if best else "unknown"


def slot_action(port, action, row):
    """llama-server's slot 0 save or restore of the conversation's file;
    its time and response go into row as <action>_s and <action>_response."""
    t = time.monotonic()
    code, body = http_json(port, "POST", f"/slots/0?action={action}", {"filename": "conv.bin"},
                           timeout=600)
    row[f"{action}_s"] = time.monotonic() - t
    if code != 200:
        raise RuntimeError(f"llama-server slot {action}: HTTP {code} {body}")
    row[f"{action}_response"] = body

def run_variant(name, a, model, conv, work, max_model_len, pool_blocks, log_dir):
    """One variant on fresh servers; returns its row."""
    row = {"variant": name}
    disk = os.path.join(work, name.replace(".", "_"))
    os.makedirs(disk, exist_ok=True)
    log = os.path.join(log_dir, f"restart.{name}")
    if name == "llama.cpp":
        flags = ["--slot-save-path", disk + "/"]
        first = Server("llama.cpp", model, a, log + ".1.log", flags, max_model_len)
        first.start()
        try:
            conv.history(first.port)
            slot_action(first.port, "save", row)
        finally:
            first.stop()
        second = Server("llama.cpp", model, a, log + ".2.log", flags, max_model_len)
        second.start()
        try:
            row["start_s"] = second.start_seconds
            warm_up(second.port, a, row)  # before the restore: it runs on slot 0 too
            slot_action(second.port, "restore", row)
            row.update(timed_next_turn(second.port, conv))
        finally:
            second.stop()
        row["saved_bytes"] = sum(os.path.getsize(os.path.join(disk, f)) for f in os.listdir(disk))
        return row

    base = ["--kv-backend", "paged", "--kv-disk-dir", disk, "--kv-disk-gib", "4", "--kv-dtype", a.kv_dtype]
    if name == "kill9":
        base += ["--kv-blocks", str(pool_blocks)]
    if name == "restart-nopreload":
        base += ["--kv-disk-preload-gib", "0"]
    first = Server("kvfork-paged", model, a, log + ".1.log", base, max_model_len)
    first.start()
    second = None
    try:
        if name == "cold":
            warm_up(first.port, a, row)
            row.update(timed_next_turn_cold(first.port, conv, a))
            row["disk"] = first.disk()
            return row
        history = conv.history(first.port)
        if name == "warm":
            row.update(timed_next_turn(first.port, conv))
            row["disk"] = first.disk()
            return row
        if name in CLEAN_RESTARTS:
            t = time.monotonic()
            first.stop()
            row["stop_s"] = time.monotonic() - t  # SIGTERM to exit: the shutdown writes
        else:  # kill9
            # Fillers of about the pool's size, until the conversation's full
            # blocks have been written (a second one evicts what the first left).
            u = history[-1]["usage"]
            conv_blocks = (u["prompt_tokens"] + u["completion_tokens"] - 1) // BLOCK_TOKENS
            row["fillers"] = 0
            while True:
                filler = scenarios.text_of_words(scenarios.random.Random(9 + row["fillers"]),
                                                 max(BLOCK_TOKENS, max_model_len - 96))
                r = stream_chat(first.port, chat_body([{"role": "user", "content": "Filler. " + filler}], 1))
                if not r["ok"]:
                    raise RuntimeError(f"filler request failed: {r['error']}")
                row["fillers"] += 1
                row["disk_before_kill"], row["settle_s"] = wait_settled(first, a.settle_seconds)
                if row["disk_before_kill"]["blocks_written"] >= conv_blocks or row["fillers"] == 3:
                    break
            first.kill9()
        row["files_on_disk"] = len(block_files(disk))
        second = Server("kvfork-paged", model, a, log + ".2.log", base, max_model_len)
        second.start()
        row["start_s"] = second.start_seconds
        warm_up(second.port, a, row)
        if name == "restart-preloaded":
            row["preload_end_s"] = wait_preload_end(second)
        before = second.disk()
        row["preload_running_at_turn"] = before.get("preload_running")
        row["preloaded_blocks_at_turn"] = before.get("preloaded_blocks")
        row.update(timed_next_turn(second.port, conv))
        row["disk"] = second.disk()
        # The preload's time from the server's start to its end (ms; 0 while
        # it runs): wait for it, so a turn sent mid-preload still reports it.
        for _ in range(600):
            if not row["disk"].get("preload_running"):
                break
            time.sleep(0.1)
            row["disk"] = second.disk()
        if name == "restart":
            row["read_rates"] = read_rates(block_files(disk))
            row["fs"] = fs_type(disk)
        return row
    finally:
        first.stop()
        if second is not None:
            second.stop()


def timed_next_turn_cold(port, conv, a):
    """The next turn's whole prompt on an empty server. The history's replies
    are each server's own, so cold runs after a variant that recorded them."""
    if not conv.messages:
        raise RuntimeError("cold needs the conversation's replies: run it after warm, restart or kill9")
    return timed_next_turn(port, conv)


def break_even(rows, model):
    """Where reading a block back beats computing it, from this run."""
    cold, restart = rows.get("cold"), rows.get("restart")
    if not cold or not restart or not restart.get("read_rates"):
        return None
    rr = restart["read_rates"]
    # The files' own size: the KV format (--kv-dtype) sets it, not the shape alone.
    pc = rr["page_cache"]
    block_bytes = pc["bytes"] // pc["blocks"] if pc["blocks"] else model["kv_bytes_per_token"] * BLOCK_TOKENS
    prefill_tps = cold["prompt_tokens"] / cold["ttft_s"]
    compute_block_s = BLOCK_TOKENS / prefill_tps
    out = {"block_tokens": BLOCK_TOKENS, "block_payload_bytes": block_bytes,
           "prefill_tokens": cold["prompt_tokens"],
           "prefill_tokens_per_s": prefill_tps, "compute_s_per_block": compute_block_s}
    for key in ("dropped_cache", "page_cache"):
        r = rr[key]
        mean = r["seconds"] / r["blocks"]  # the mean, as the total a prefix pays; p50 is in read_rates
        out[key] = {"bytes_per_s": r["bytes_per_s"], "read_s_per_block": mean,
                    "read_s_per_block_p50": r["block_latency_p50_s"],
                    "read_vs_compute": compute_block_s / mean if mean > 0 else None,
                    # reading wins while the storage delivers more than this:
                    "break_even_bytes_per_s": (rr[key]["bytes"] / r["blocks"]) / compute_block_s}
    # In the server: the restart's extra TTFT over warm, per block read back.
    warm = rows.get("warm")
    hits = (restart.get("disk") or {}).get("hit_blocks") or 0
    if warm and hits:
        out["server_extra_ttft_s_per_block_read"] = (restart["ttft_s"] - warm["ttft_s"]) / hits
    return out


def fmt(v, scale=1.0, digits=0):
    return "-" if v is None else f"{v * scale:,.{digits}f}"


def ratio(num, den, digits):
    return "-" if not num or not den else f"{num / den:,.{digits}f}x"


def table(rows, be, meta):
    lines = [f"restart benchmark: {meta['shape']}, {meta['context_tokens']}-word first message, "
             f"{meta['turns']} turns before the timed one, {meta['threads']} threads, "
             f"{meta['kv_dtype']} KV"
             + (", a warm-up request on each new server" if meta["warmup"] else "") + "; "
             f"machine: {meta['cores']} cores, load {meta['load_before']} -> {meta['load_after']} "
             "(shared and loaded: compare ratios from this run, not absolute times)", "",
             "| variant | next-turn TTFT ms | prompt tokens | cached tokens | vs warm | cold / this | "
             "start to /health s | start to preload end s | note |", "|---|---|---|---|---|---|---|---|---|"]
    warm = (rows.get("warm") or {}).get("ttft_s")
    cold = (rows.get("cold") or {}).get("ttft_s")
    for name in VARIANTS:
        r = rows.get(name)
        if r is None:
            continue
        if "error" in r:
            lines.append(f"| {name} | - | - | - | - | - | - | - | {r['error'][:120]} |")
            continue
        note = ""
        if name in CLEAN_RESTARTS:
            note = f"clean stop {fmt(r.get('stop_s'), 1, 2)} s, {r.get('files_on_disk')} block files"
            d = r.get("disk") or {}
            if d.get("preloaded_blocks") or r.get("preload_running_at_turn"):
                note += (f"; preload {d.get('preloaded_blocks')} blocks in {fmt(d.get('preload_ms'), 1, 0)} ms "
                         f"from the cache's creation, {'still running' if r.get('preload_running_at_turn') else 'done'} "
                         f"when the turn was sent ({r.get('preloaded_blocks_at_turn')} blocks by then)")
        elif name == "kill9":
            note = f"{r.get('files_on_disk')} block files survived SIGKILL"
        elif name == "llama.cpp":
            note = f"save {fmt(r.get('save_s'), 1, 2)} s, restore {fmt(r.get('restore_s'), 1, 2)} s"
        t = r["ttft_s"]
        lines.append(f"| {name} | {fmt(t, 1e3)} | {r['prompt_tokens']} | {r['cached_tokens']} | "
                     f"{ratio(t, warm, 2)} | {ratio(cold, t, 1)} | "
                     f"{fmt(r.get('start_s'), 1, 2)} | {fmt(r.get('preload_end_s'), 1, 2)} | {note} |")
    if be:
        lines += ["", f"break-even ({be['block_tokens']}-token blocks of {be['block_payload_bytes']:,} bytes): "
                  f"prefill {be['prefill_tokens_per_s']:,.0f} tokens/s at {be['prefill_tokens']} tokens = "
                  f"{be['compute_s_per_block'] * 1e3:.2f} ms a block"]
        for key, label in (("dropped_cache", "read after DONTNEED"), ("page_cache", "read from page cache")):
            r = be[key]
            lines.append(f"  {label}: {r['bytes_per_s'] / 1e6:,.0f} MB/s, {r['read_s_per_block'] * 1e3:.3f} ms a "
                         f"block (mean; p50 {r['read_s_per_block_p50'] * 1e3:.3f} ms): reading is "
                         f"{r['read_vs_compute']:,.0f}x faster than computing; it wins above "
                         f"{r['break_even_bytes_per_s'] / 1e6:,.2f} MB/s")
        if "server_extra_ttft_s_per_block_read" in be:
            lines.append(f"  in the server: (restart TTFT - warm TTFT) / blocks read = "
                         f"{be['server_extra_ttft_s_per_block_read'] * 1e3:.3f} ms a block")
    return "\n".join(lines)


def main(argv):
    a = parse_args(argv)
    t_start = time.monotonic()
    if not os.access(a.kvfork, os.X_OK):
        raise SystemExit(f"bench restart: no kvfork binary at {a.kvfork} (run `make build`)")
    notes = list(a.note)
    if "llama.cpp" in a.variants and not os.access(a.llama_server, os.X_OK):
        msg = (f"llama.cpp skipped: no llama-server at {a.llama_server} "
               "(scripts/setup-llama-server.sh builds it)")
        print("bench restart: " + msg, flush=True)
        notes.append(msg)
        a.variants.remove("llama.cpp")
    model = bench_serve.prepare_model(a, "llama.cpp" in a.variants)
    # Room for the conversation, its replies and the timed turn.
    need = a.context_tokens + 64 + a.turns * (a.user_words + a.max_tokens + 16) + 64
    max_model_len = min(model["context"], BLOCK_TOKENS * math.ceil(need * 1.25 / BLOCK_TOKENS))
    pool_blocks = max_model_len // BLOCK_TOKENS + 2
    cpu, cores, mem = bench_serve.machine()
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": shlex.join(["bench/serve/bench_restart.py"] + argv), "cpu": cpu, "cores": cores,
            "mem_gib": mem, "load_before": bench_serve.load_avg(), "shape": a.shape,
            "kv_bytes_per_token": model["kv_bytes_per_token"], "context_tokens": a.context_tokens,
            "turns": a.turns, "user_words": a.user_words, "max_tokens": a.max_tokens, "threads": a.threads,
            "kv_dtype": a.kv_dtype, "warmup": a.warmup, "max_model_len": max_model_len, "kill9_pool_blocks": pool_blocks,
            "variants": a.variants,
            "kvfork_commit": bench_serve.git_rev(ROOT), "notes": notes}
    os.makedirs(a.out, exist_ok=True)
    log_dir = a.log_dir
    os.makedirs(os.path.join(ROOT, "out"), exist_ok=True)
    work = a.work_dir or tempfile.mkdtemp(prefix="bench-restart-", dir=os.path.join(ROOT, "out"))
    conv = Conversation(a)
    rows = {}
    # cold needs a conversation's replies: it runs last among the kvfork variants.
    order = [v for v in VARIANTS if v in a.variants and v != "cold"]
    if "cold" in a.variants:
        order.insert(len([v for v in order if v != "llama.cpp"]), "cold")
    try:
        for name in order:
            t0 = time.monotonic()
            print(f"bench restart: {name} ...", end="", flush=True)
            try:
                rows[name] = run_variant(name, a, model, conv, work, max_model_len, pool_blocks, log_dir)
                r = rows[name]
                print(f" {time.monotonic() - t0:.1f} s, TTFT {r['ttft_s'] * 1e3:.0f} ms, cached "
                      f"{r['cached_tokens']}/{r['prompt_tokens']}, load {bench_serve.load_avg()}", flush=True)
            except (RuntimeError, OSError) as e:
                rows[name] = {"variant": name, "error": str(e)[:2000]}
                print(f" failed: {str(e)[:500]}", flush=True)
            # Each finished variant is kept at once: a 16k run on loaded cores takes an
            # hour, and one stopped part way still has its rows.
            with open(os.path.join(a.out, "restart.json"), "w") as f:
                json.dump({"meta": meta, "rows": rows, "partial": True}, f, indent=1)
    finally:
        if not a.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    be = break_even(rows, model)
    meta["load_after"] = bench_serve.load_avg()
    meta["total_s"] = time.monotonic() - t_start
    page = table(rows, be, meta)
    with open(os.path.join(a.out, "restart.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "break_even": be}, f, indent=1)
    print()
    print(page)
    print(f"bench restart: wrote {a.out}/restart.json")
    return 1 if any("error" in r for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
