"""The disk tier end to end (issue 25): the real `kvfork serve --kv-disk-dir`
on loopback, with a pool too small for the workload so blocks are evicted
to disk while it runs.

  1. server A answers a set of prompts (temperature 0) and stops cleanly
     (SIGTERM): every cached block is on disk;
  2. server B on the same directory gives the same answers with cached
     tokens read from disk, then is killed with SIGKILL in the middle of a
     heavy workload;
  3. every other block file is corrupted (a flipped payload byte) and a
     stale temp file of a dead writer is planted;
  4. server C recovers: it indexes the directory, deletes the stale temp
     file, gives the same answers again, counts the corrupt blocks it met
     and deletes their files: never served;
  5. the directory is made read-only: server D (run as an unprivileged user
     when the test runs as root, whom permission bits do not stop) gives the
     same answers with blocks read from disk, logs and counts every write it
     cannot make, and stops cleanly; a read-only directory without this
     model's subdirectory is refused at start, naming --kv-disk-dir.

Also: --kv-disk-dir with the dense backend is refused naming the flag."""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvfork_test_env import (KVFORK, fail, free_port, http, make_tiny_model,  # noqa: E402
                             start_server)


# Run as nobody when the test is root: root ignores a directory's mode.
AS_UNPRIVILEGED = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
                   if os.geteuid() == 0 else [])


class Server:
    def __init__(self, model, disk, log, extra=(), prefix=()):
        self.port = free_port()
        self.cmd = [*prefix, KVFORK, "serve", "--model", model, "--served-model-name", "tiny",
                    "--host", "127.0.0.1", "--port", str(self.port), "--threads", "1",
                    "--kv-backend", "paged", "--kv-blocks", "48", "--max-num-seqs", "2",
                    "--kv-disk-dir", disk, "--kv-disk-gib", "1", *extra]
        self.log = log

    def start(self):
        self.proc = start_server(self.cmd, self.port, self.log)
        return self

    def stats(self):
        code, st = http(self.port, "GET", "/v1/cache/stats")
        if code != 200 or "disk" not in st:
            fail(f"/v1/cache/stats: {code} {st}")
        return st["disk"]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        if self.proc.wait(timeout=60) != 0:
            fail(f"server exited {self.proc.returncode} on SIGTERM")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


PROMPTS = [" ".join(f"document {d} paragraph {i} describes item {d * 13 + i} in detail"
                    for i in range(14)) for d in range(5)]


def answers(port):
    out, cached = [], 0
    for p in PROMPTS:
        code, body = http(port, "POST", "/v1/completions",
                          {"model": "tiny", "prompt": p, "max_tokens": 8, "temperature": 0})
        if code != 200:
            fail(f"completion: {code} {body}")
        out.append(body["choices"][0]["text"])
        cached += body["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) or 0
    return out, cached


def block_files(disk):
    subs = [os.path.join(disk, d) for d in os.listdir(disk)]
    if len(subs) != 1:
        fail(f"expected one fingerprint directory in {disk}, found {subs}")
    return subs[0], sorted(f for f in os.listdir(subs[0]) if f.endswith((".kvb", ".kvp")))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(tmp, 11)
        disk = os.path.join(tmp, "disk")
        log = open(os.path.join(tmp, "server.log"), "w")  # .name is read back
        try:
            run(model, disk, log)
        except SystemExit:
            log.flush()
            print(open(os.path.join(tmp, "server.log")).read()[-4000:])
            raise
        bad = subprocess.run([KVFORK, "serve", "--model", model, "--kv-backend", "dense",
                              "--kv-disk-dir", disk, "--port", "0"],
                             capture_output=True, text=True, timeout=60)
        if bad.returncode == 0 or "--kv-disk-dir" not in bad.stderr:
            fail(f"dense + --kv-disk-dir: exit {bad.returncode}, {bad.stderr[-500:]}")
    print("PASS")


def run(model, disk, log):
    # 1. Cold, then a clean stop.
    a = Server(model, disk, log).start()
    want, cached_a = answers(a.port)
    # Writes on eviction happen while the server runs (asynchronously; the
    # stats read the writer's counters live).
    deadline = time.monotonic() + 30
    while a.stats()["blocks_written"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    if a.stats()["blocks_written"] == 0:
        fail(f"a pool of 48 blocks under 5 prompts wrote nothing while running: {a.stats()}")
    a.stop()
    sub, files = block_files(disk)
    print(f"after a clean stop: {len(files)} block files", flush=True)
    # The pool holds 48 blocks, so files beyond 48 were written on eviction
    # while the server ran (the writer is asynchronous: the server's stats
    # may not show them yet when the last answer arrives).
    if len(files) <= 48:
        fail(f"5 prompts of 11 blocks through a 48-block pool left {len(files)} files")

    # 2. Restart: same answers, prefixes read from disk; then kill -9 under load.
    b = Server(model, disk, log).start()
    if b.stats()["scanned_files"] != len(files):
        fail(f"indexed {b.stats()['scanned_files']} of {len(files)} files")
    got, cached_b = answers(b.port)
    if got != want:
        fail(f"answers after a restart differ:\n{got}\n{want}")
    st = b.stats()
    if cached_b <= cached_a or st["hit_blocks"] == 0 or st["corrupt_blocks"] != 0:
        fail(f"restart: cached {cached_b} (cold {cached_a}), disk {st}")
    print(f"restart: cached_tokens {cached_b} (cold run {cached_a}), {st['hit_blocks']} blocks "
          f"read from disk", flush=True)
    # The preload at start (on by default: half the 48-block pool) planned
    # whole chains of the files the clean stop wrote last, and ends.
    for _ in range(300):
        if not st["preload_running"]:
            break
        time.sleep(0.1)
        st = b.stats()
    if st["preload_running"] or st["preload_planned_blocks"] <= 0 or st["preload_planned_blocks"] > 24:
        fail(f"restart: the preload at start planned {st['preload_planned_blocks']} blocks: {st}")
    print(f"restart: the preload planned {st['preload_planned_blocks']} blocks and read "
          f"{st['preloaded_blocks']} into the pool in {st['preload_ms']:.1f} ms", flush=True)
    stop = threading.Event()

    def load(i):
        n = 0
        while not stop.is_set():
            prompt = f"load {i} {n} " + " ".join(f"word{i}x{n}x{k}" for k in range(60))
            try:
                http(b.port, "POST", "/v1/completions",
                     {"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0},
                     timeout=30)
            except OSError:
                return
            n += 1

    threads = [threading.Thread(target=load, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(3)
    b.kill()
    stop.set()
    for t in threads:
        t.join()

    # 3. Damage: every other block file gets a flipped byte; a dead writer's temp file.
    sub, files = block_files(disk)
    damaged = {}  # name -> its damaged bytes
    for f in files[::2]:
        path = os.path.join(sub, f)
        with open(path, "r+b") as fh:
            size = os.path.getsize(path)
            fh.seek(size - 7)
            byte = fh.read(1)
            fh.seek(size - 7)
            fh.write(bytes([byte[0] ^ 0x5A]))
        with open(path, "rb") as fh:
            damaged[f] = fh.read()
    stale = os.path.join(sub, "00000000000000ff.kvb.tmp.4194305.1")
    with open(stale, "wb") as fh:
        fh.write(b"torn")

    # 4. Recovery: same answers, corrupt blocks counted and deleted, never served.
    log.flush()
    log_start = os.path.getsize(log.name)
    c = Server(model, disk, log).start()
    if os.path.exists(stale):
        fail("the dead writer's temp file survived the start")
    got, _ = answers(c.port)
    if got != want:
        fail(f"answers after kill -9 and corruption differ:\n{got}\n{want}")
    st = c.stats()
    log.flush()
    with open(log.name) as fh:
        fh.seek(log_start)
        named = [line.split(sub + "/")[1].split(" ")[0] for line in fh
                 if "is unusable, deleted" in line]
    if st["corrupt_blocks"] == 0 or len(named) != st["corrupt_blocks"]:
        fail(f"corrupt blocks counted {st['corrupt_blocks']}, logged {len(named)}: {st}")
    for f in named:
        if f not in damaged:
            fail(f"{f} was refused but never damaged")
        path = os.path.join(sub, f)
        # Gone, or written anew after it was recomputed (then intact).
        if os.path.exists(path) and open(path, "rb").read() == damaged[f]:
            fail(f"{f} was refused but its damaged file is still there")
    print(f"recovery: {st['corrupt_blocks']} corrupt blocks met, deleted and recomputed; "
          f"{st['hit_blocks']} valid blocks read", flush=True)
    c.stop()
    read_only(model, disk, log, want)


def read_only(model, disk, log, want):
    """5. A read-only directory: reads work, writes fail loudly, nothing crashes."""
    sub, files = block_files(disk)
    tmp = os.path.dirname(disk)
    os.chmod(tmp, 0o755)  # the unprivileged server reads the model
    for f in files:
        os.chmod(os.path.join(sub, f), 0o444)
    os.chmod(sub, 0o555)
    os.chmod(disk, 0o555)
    log.flush()
    log_start = os.path.getsize(log.name)
    d = Server(model, disk, log, prefix=AS_UNPRIVILEGED).start()
    got, cached = answers(d.port)
    if got != want:
        fail(f"answers on a read-only directory differ:\n{got}\n{want}")
    # New prompts evict blocks that are not on disk yet: their writes fail.
    for i in range(4):
        code, body = http(d.port, "POST", "/v1/completions",
                          {"model": "tiny", "prompt": " ".join(f"novel{i} word{k}" for k in range(90)),
                           "max_tokens": 2, "temperature": 0})
        if code != 200:
            fail(f"completion on a read-only directory: {code} {body}")
    deadline = time.monotonic() + 30
    while d.stats()["write_errors"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    st = d.stats()
    d.stop()
    log.flush()
    with open(log.name) as fh:
        fh.seek(log_start)
        refused = [line for line in fh if "writing block" in line and "Permission denied" in line]
    if cached == 0 or st["hit_blocks"] == 0 or st["write_errors"] == 0 or not refused:
        fail(f"read-only directory: cached {cached}, disk {st}, {len(refused)} write errors logged")
    if block_files(disk)[1] != files:
        fail("files changed in a read-only directory")
    print(f"read-only directory: {st['hit_blocks']} blocks read, {st['write_errors']} writes "
          f"refused and logged, no crash", flush=True)
    # Without this model's subdirectory nothing can be kept: refused at start.
    empty = os.path.join(tmp, "empty-ro")
    os.mkdir(empty, 0o555)
    p = subprocess.run([*AS_UNPRIVILEGED, KVFORK, "serve", "--model", model, "--port", "0",
                        "--threads", "1", "--kv-backend", "paged", "--kv-disk-dir", empty,
                        "--kv-disk-gib", "1"], capture_output=True, text=True, timeout=60)
    if p.returncode == 0 or "--kv-disk-dir" not in p.stderr or "cannot create" not in p.stderr:
        fail(f"an empty read-only --kv-disk-dir: exit {p.returncode}, {p.stderr[-500:]}")
    for path in (disk, sub, empty):  # let the temporary directory go
        os.chmod(path, 0o755)


if __name__ == "__main__":
    main()
