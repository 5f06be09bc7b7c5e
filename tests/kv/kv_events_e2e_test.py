"""KV events end to end: the real `kvfork serve --kv-events` on loopback, read
by a subscriber written from vLLM's documented schema
(tools/kv_events/kv_event_subscriber.py, Debian's python3-zmq and
python3-msgpack). After every phase of a workload, the set of blocks the
subscriber rebuilt from events equals /v1/cache/stats?blocks=1:

  1. conversations with shared system prompts on a small pool (evictions);
  2. after POST /v1/cache/reset (AllBlocksCleared);
  3. after a restart of the server on the same ports: the subscriber sees the
     sequence start over and rebuilds from the replay socket;
  4. with a disk tier (--kv-disk-dir) the subscriber keeps one set per medium
     (CPU: the pool; DISK: blocks written to disk, announced once their file
     is complete, and removed when the tier drops them): they equal
     /v1/cache/stats?blocks=1's block_hashes and disk_block_hashes after a
     workload that spills to disk, after a reset (the disk keeps its blocks),
     and after a restart, when the new process announces the files it finds.

Also: every block hash follows the chain docs/kv_cache.md documents, the
topic is kv@<host>@<model>, /metrics has vllm:cache_config_info and no
dropped events, and the flag errors name the flag."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvfork_test_env import (KVFORK, SRC, fail, free_port, http,  # noqa: E402
                             make_tiny_model, start_server)

sys.path.insert(0, os.path.join(SRC, "tools/kv_events"))
from kv_event_subscriber import Subscriber  # noqa: E402


POOL_BLOCKS = 32



class Server:
    def __init__(self, model, ports, log, extra=()):
        self.http, self.pub, self.replay = ports
        self.cmd = [KVFORK, "serve", "--model", model, "--served-model-name", "tiny",
                    "--host", "127.0.0.1", "--port", str(self.http), "--threads", "1",
                    "--kv-backend", "paged", "--kv-blocks", str(POOL_BLOCKS), "--max-num-seqs", "4",
                    "--kv-events", f"tcp://*:{self.pub}", "--kv-events-replay", f"tcp://*:{self.replay}",
                    *extra]
        self.log = log

    def start(self):
        self.proc = start_server(self.cmd, self.http, self.log)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def workload(port, tag, conversations=6, turns=2):
    """Conversations behind three shared system prompts, 3 at a time."""
    systems = [" ".join(f"system{s} rule {i} says be brief and kind" for i in range(12))
               for s in range(3)]
    errors = []

    def conversation(c):
        prompt = systems[c % 3]
        for t in range(turns):
            prompt += f" user {tag} {c} turn {t} asks about topic {c * 7 + t} please answer"
            code, body = http(port, "POST", "/v1/completions",
                              {"model": "tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0})
            if code != 200:
                errors.append(f"{code} {body}")
                return
            prompt += body["choices"][0]["text"]

    for start in range(0, conversations, 3):
        threads = [threading.Thread(target=conversation, args=(c,))
                   for c in range(start, min(conversations, start + 3))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    if errors:
        fail(f"workload {tag}: {errors[:3]}")


def dump(port):
    code, st = http(port, "GET", "/v1/cache/stats?blocks=1")
    if code != 200:
        fail(f"/v1/cache/stats?blocks=1: {code} {st}")
    if st["block_hashes"] != sorted(st["block_hashes"]):
        fail("block_hashes are not sorted")
    return st


def expect_same(sub, port, phase):
    st = dump(port)
    want = set(st["block_hashes"])
    got = sub.wait_for(lambda s: s == want, timeout=15)
    if got != want:
        fail(f"{phase}: subscriber has {len(got)} blocks, server {len(want)}; "
             f"{len(got - want)} extra, {len(want - got)} missing; counts {sub.replica.counts}")
    print(f"{phase}: {len(want)} blocks agree; events {sub.replica.counts}, "
          f"evictions {st['evictions']}, restarts {sub.replica.restarts}, "
          f"replays {sub.replica.replays}", flush=True)
    return st


def expect_same_media(sub, port, phase, timeout=20):
    """The subscriber's per-medium sets equal the replica's dump. Disk writes
    finish on the tier's own thread, so both sides are read again until they
    agree (or the time runs out)."""
    deadline = time.monotonic() + timeout
    while True:
        st = dump(port)
        if "disk_block_hashes" not in st:
            fail(f"{phase}: /v1/cache/stats?blocks=1 has no disk_block_hashes with --kv-disk-dir")
        want = {"CPU": set(st["block_hashes"]), "DISK": set(st["disk_block_hashes"])}
        want = {m: b for m, b in want.items() if b}
        got = sub.snapshot_media()
        if got == want:
            break
        if time.monotonic() > deadline:
            detail = {m: (len(got.get(m, ())), len(want.get(m, ()))) for m in set(got) | set(want)}
            fail(f"{phase}: per-medium sets differ, (subscriber, server) sizes {detail}; "
                 f"counts {sub.replica.counts}")
        time.sleep(0.1)
    print(f"{phase}: CPU {len(want.get('CPU', ()))} and DISK {len(want.get('DISK', ()))} blocks agree; "
          f"events {sub.replica.counts}, disk {st['disk']}", flush=True)
    return st


def disk_phase(model, tmp):
    """Part 4: the disk tier's blocks announced with medium DISK."""
    ports = (free_port(), free_port(), free_port())
    log = open(os.path.join(tmp, "serve-disk.log"), "w")
    disk = os.path.join(tmp, "kv-disk")
    server = Server(model, ports, log, extra=["--kv-disk-dir", disk, "--kv-disk-gib", "1"])
    server.start()
    sub = Subscriber(f"tcp://127.0.0.1:{ports[1]}", f"tcp://127.0.0.1:{ports[2]}", topic="kv@",
                     verify_hashes=True)
    try:
        workload(server.http, "d", conversations=9)
        # The evicted blocks' writes finish on the tier's thread (an fsync
        # each): until one has, both sides agree on an empty DISK set.
        deadline = time.monotonic() + 30
        while dump(server.http)["disk"]["blocks"] <= 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        st = expect_same_media(sub, server.http, "disk: workload that spills to disk")
        if st["evictions"] <= 0 or not st["disk_block_hashes"]:
            fail(f"disk: nothing spilled (evictions {st['evictions']}, disk {st['disk']})")
        if sub.replica.media != {"CPU", "DISK"}:
            fail(f"disk: media {sub.replica.media}, want CPU and DISK")
        # A second pass reads prefixes back from disk into the pool.
        workload(server.http, "d", conversations=9)
        st = expect_same_media(sub, server.http, "disk: workload that reads back from disk")
        if st["disk"]["hit_blocks"] <= 0:
            fail(f"disk: nothing read back from disk: {st['disk']}")

        code, _ = http(server.http, "POST", "/v1/cache/reset", {})
        if code != 200:
            fail(f"/v1/cache/reset: {code}")
        st = expect_same_media(sub, server.http, "disk: after a cache reset")
        if st["block_hashes"] or not st["disk_block_hashes"]:
            fail("disk: the reset should empty the pool's index and keep the disk's blocks")

        # A clean stop writes the pool's blocks to disk; the new process
        # announces every file it finds (AllBlocksCleared at seq 0 first).
        connects = sub.connects
        server.stop()
        server.start()
        sub.wait_connects(connects + 1)
        workload(server.http, "e", conversations=3)
        st = expect_same_media(sub, server.http, "disk: after a restart")
        if sub.replica.restarts < 1:
            fail("disk: the restart was not seen")
        if st["disk"]["scanned_files"] <= 0:
            fail(f"disk: the restarted server found no files: {st['disk']}")
    finally:
        sub.close()
        if server.proc.poll() is None:
            server.stop()
        log.close()


def check_flag_errors(model):
    for extra, needle in [(["--kv-backend", "dense", "--kv-events", "tcp://*:%d" % free_port()],
                           "--kv-backend paged"),
                          (["--kv-events-replay", "tcp://*:%d" % free_port()], "--kv-events"),
                          (["--kv-events", "tcp://*:notaport"], "--kv-events")]:
        p = subprocess.run([KVFORK, "serve", "--model", model, "--port", "0", "--threads", "1"] + extra,
                           capture_output=True, text=True, timeout=60)
        if p.returncode == 0 or needle not in p.stderr:
            fail(f"{extra}: exit {p.returncode}, stderr does not name {needle}: {p.stderr[-500:]}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(tmp, 11)
        check_flag_errors(model)
        ports = (free_port(), free_port(), free_port())
        log = open(os.path.join(tmp, "serve.log"), "w")
        server = Server(model, ports, log)
        server.start()
        sub = Subscriber(f"tcp://127.0.0.1:{ports[1]}", f"tcp://127.0.0.1:{ports[2]}", topic="kv@",
                         verify_hashes=True)
        try:
            workload(server.http, "a", conversations=9)
            st = expect_same(sub, server.http, "workload on a small pool")
            if st["evictions"] <= 0:
                fail("the workload evicted nothing: the pool is too big for the test")
            if sub.replica.block_size != st["block_size"] or sub.replica.media != {"CPU"}:
                fail(f"block_size {sub.replica.block_size} media {sub.replica.media}")
            host = socket.gethostname()
            if sub.topics_seen != {f"kv@{host}@tiny"}:
                fail(f"topics {sub.topics_seen}, want kv@{host}@tiny")
            if sub.replica.counts["BlockRemoved"] <= 0:
                fail("no BlockRemoved although blocks were evicted")

            cleared = sub.replica.counts["AllBlocksCleared"]
            code, _ = http(server.http, "POST", "/v1/cache/reset", {})
            if code != 200:
                fail(f"/v1/cache/reset: {code}")
            st = expect_same(sub, server.http, "after a cache reset")
            if st["block_hashes"] or sub.replica.counts["AllBlocksCleared"] <= cleared:
                fail("the reset did not clear the index or announce AllBlocksCleared")
            workload(server.http, "b", conversations=3)
            expect_same(sub, server.http, "workload after the reset")

            code, metrics = http(server.http, "GET", "/metrics")
            want = f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="{POOL_BLOCKS}"'
            if want not in metrics:
                fail(f"/metrics has no {want}")
            if 'kvfork_kv_events_dropped_total{model_name="tiny"} 0' not in metrics:
                fail("events were dropped or the counter is missing")

            connects = sub.connects
            server.stop()
            server.start()
            # The first batches of the new process may pass before the SUB
            # socket has reconnected; the seq starting over sends the
            # subscriber to the replay socket for them. The workload waits
            # for the reconnect: were all its batches sent before it, nothing
            # would show the subscriber that the publisher restarted.
            sub.wait_connects(connects + 1)
            workload(server.http, "c", conversations=3)
            expect_same(sub, server.http, "after a restart")
            if sub.replica.restarts < 1 or sub.replica.replays < 1:
                fail(f"restart not seen through the replay socket: restarts {sub.replica.restarts}, "
                     f"replays {sub.replica.replays}")
        finally:
            sub.close()
            if server.proc.poll() is None:
                server.stop()
            log.close()
        disk_phase(model, tmp)
    print("PASS")


if __name__ == "__main__":
    main()
