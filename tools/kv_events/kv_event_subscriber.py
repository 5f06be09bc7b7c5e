"""A KV-event subscriber written from vLLM's documented schema, not from
kvfork's code: it is the independent reader the KV-event tests trust.

The schema, as vllm/distributed/kv_events.py defines it (msgspec structs with
array_like=True, tag=True) and examples/online_serving/kv_events_subscriber.py
reads it:

  PUB message:  [topic, seq (8-byte big-endian), msgpack(EventBatch)]
  EventBatch:   [ts, [event, ...], data_parallel_rank?]
  BlockStored:  ["BlockStored", block_hashes, parent_block_hash, token_ids,
                 block_size, lora_id, medium?, lora_name?, ...]
  BlockRemoved: ["BlockRemoved", block_hashes, medium?, ...]
  AllBlocksCleared: ["AllBlocksCleared"]
  Replay:       send [b"", start seq (8 bytes)] to the ROUTER (from a DEALER);
                receive [b"", seq, payload]... then [b"", -1 (8 bytes), b""].

Each instance rebuilds the set of cached block hashes of one replica, one set
per medium (kvfork: "CPU" for its RAM pool, "DISK" for its disk tier; an
event without a medium counts as "GPU", llm-d's default tier): a block may be
held on several media at once, and BlockRemoved names the medium it left.
AllBlocksCleared empties every medium. Missed
batches (a seq gap) and a restarted publisher (seq going back) are repaired
through the replay socket. vLLM's protocol has no publisher epoch, so a
restart is recognised only by the seq going back: a subscriber that is away
long enough for the new process to publish past the old seq sees a gap
instead, and would keep stale blocks unless it replays from 0 (kvfork's seq
0 is AllBlocksCleared). Uses Debian's python3-zmq and python3-msgpack.
"""

import threading
import time

import msgpack
import zmq
from zmq.utils.monitor import recv_monitor_message

END_SEQ = -1


class ProtocolError(Exception):
    pass


def _splitmix(x):
    """kvfork's documented block hash step (docs/kv_cache.md), for checking
    that the hashes on the wire follow the documented chain."""
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def documented_block_hash(parent_hash, token_ids, salt_key=0):
    """hash = fold splitmix(h ^ uint32(token)) from the parent's hash, or from
    splitmix(0x5a17 ^ salt_key) for a first block (salt_key 0: no salt)."""
    h = _splitmix(0x5A17 ^ salt_key) if parent_hash is None else parent_hash
    for t in token_ids:
        h = _splitmix(h ^ (t & 0xFFFFFFFF))
    return h


class Replica:
    """What one publisher has told us: the set of cached blocks."""

    DEFAULT_MEDIUM = "GPU"

    def __init__(self, verify_hashes=False):
        self.media_blocks = {}    # medium -> {hash -> (parent hash, token ids)}
        self.next_seq = None      # the seq expected next; None before the first
        self.counts = {"BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0}
        self.batches = 0
        self.replays = 0
        self.restarts = 0
        self.block_size = None
        self.media = set()
        self.verify_hashes = verify_hashes
        self.lock = threading.Lock()

    @property
    def blocks(self):
        """Every block on any medium: hash -> (parent hash, token ids)."""
        out = {}
        for blocks in self.media_blocks.values():
            out.update(blocks)
        return out

    def media_sets(self):
        """medium -> set of block hashes, media with no block left out."""
        return {m: set(b) for m, b in self.media_blocks.items() if b}

    def clear(self):
        self.media_blocks.clear()

    def apply(self, seq, payload):
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        if not isinstance(batch, list) or len(batch) < 2:
            raise ProtocolError(f"EventBatch is not an array of >= 2: {batch!r:.200}")
        ts, events = batch[0], batch[1]
        if not isinstance(ts, float):
            raise ProtocolError(f"EventBatch.ts is not a float: {ts!r}")
        for ev in events:
            self._apply_event(ev)
        self.batches += 1
        self.next_seq = seq + 1

    def _apply_event(self, ev):
        if not isinstance(ev, list) or not ev or not isinstance(ev[0], str):
            raise ProtocolError(f"event is not a tagged array: {ev!r:.200}")
        tag = ev[0]
        if tag == "BlockStored":
            if len(ev) < 6:
                raise ProtocolError(f"BlockStored has {len(ev) - 1} fields, wants >= 5")
            hashes, parent, tokens, block_size = ev[1], ev[2], ev[3], ev[4]
            medium = ev[6] if len(ev) > 6 and ev[6] is not None else self.DEFAULT_MEDIUM
            self.media.add(medium)
            blocks = self.media_blocks.setdefault(medium, {})
            if len(tokens) != block_size * len(hashes):
                raise ProtocolError(f"BlockStored: {len(tokens)} tokens for {len(hashes)} blocks "
                                    f"of {block_size}")
            self.block_size = block_size
            for i, h in enumerate(hashes):
                toks = tokens[i * block_size:(i + 1) * block_size]
                p = parent if i == 0 else hashes[i - 1]
                if self.verify_hashes and documented_block_hash(p, toks) != h:
                    raise ProtocolError(f"block hash {h} is not the documented hash of its parent "
                                        f"{p} and tokens")
                blocks[h] = (p, toks)
        elif tag == "BlockRemoved":
            medium = ev[2] if len(ev) > 2 and ev[2] is not None else self.DEFAULT_MEDIUM
            blocks = self.media_blocks.get(medium, {})
            for h in ev[1]:
                if h not in blocks:
                    raise ProtocolError(f"BlockRemoved of block {h}, unknown on medium {medium}")
                del blocks[h]
        elif tag == "AllBlocksCleared":
            self.clear()
        else:
            raise ProtocolError(f"unknown event tag {tag!r}")
        self.counts[tag] += 1


class Subscriber:
    """Follows one replica's PUB socket on a background thread."""

    def __init__(self, pub_endpoint, replay_endpoint=None, topic="", verify_hashes=False):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
        # Connections (first and after each publisher restart) are counted:
        # a restart is seen only through a message of the new process, so a
        # test waits for the reconnect before it makes the new process publish.
        self._monitor = self.sub.get_monitor_socket(zmq.EVENT_CONNECTED)
        self.connects = 0
        self.sub.connect(pub_endpoint)
        self.replay_endpoint = replay_endpoint
        self.topic = topic
        self.replica = Replica(verify_hashes=verify_hashes)
        self.topics_seen = set()
        self.error = None
        # Seqs [lo, hi] a replay applied: the SUB socket may still deliver
        # them, and they are duplicates, not a restarted publisher.
        self._replayed = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _replay(self, start):
        """Asks for every buffered batch from start on; applies them in order."""
        if self.replay_endpoint is None:
            raise ProtocolError(f"missed batches from seq {start} and no replay socket")
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.RCVHWM, 0)
        dealer.connect(self.replay_endpoint)
        self.replica.replays += 1
        try:
            dealer.send_multipart([b"", start.to_bytes(8, "big")])
            while True:
                if not dealer.poll(5000):
                    raise ProtocolError(f"replay from seq {start}: no answer in 5 s")
                frames = dealer.recv_multipart()
                if len(frames) != 3 or frames[0] != b"":
                    raise ProtocolError(f"replay answer of {len(frames)} frames")
                seq = int.from_bytes(frames[1], "big", signed=True)
                if seq == END_SEQ:
                    if self.replica.next_seq is not None and self.replica.next_seq > start:
                        self._replayed = (start, self.replica.next_seq - 1)
                    return
                if seq >= start and (self.replica.next_seq is None or seq >= self.replica.next_seq):
                    self.replica.apply(seq, frames[2])
        finally:
            dealer.close()

    def _on_message(self, frames):
        if len(frames) != 3:
            raise ProtocolError(f"PUB message of {len(frames)} frames, wants 3")
        topic, seq_bytes, payload = frames
        if len(seq_bytes) != 8:
            raise ProtocolError(f"seq frame of {len(seq_bytes)} bytes")
        self.topics_seen.add(topic.decode())
        seq = int.from_bytes(seq_bytes, "big")
        r = self.replica
        with r.lock:
            if self._replayed is not None:
                lo, hi = self._replayed
                if lo <= seq <= hi:
                    return  # already applied from the replay
                if seq > hi:
                    self._replayed = None
            if r.next_seq is not None and seq < r.next_seq:
                # The publisher restarted (seq starts over at 0): what we knew
                # is stale; rebuild from its first batch.
                r.restarts += 1
                r.clear()
                r.next_seq = None
                if seq > 0:
                    self._replay(0)
            expected = 0 if r.next_seq is None else r.next_seq
            if seq > expected:
                self._replay(expected)
            if r.next_seq is None or seq >= r.next_seq:
                r.apply(seq, payload)

    def _run(self):
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                ready = dict(poller.poll(50))
                if ready.get(self._monitor):
                    if recv_monitor_message(self._monitor)["event"] == zmq.EVENT_CONNECTED:
                        self.connects += 1
                if ready.get(self.sub):
                    self._on_message(self.sub.recv_multipart())
            except Exception as e:  # noqa: BLE001 - reported to the test
                self.error = e
                return

    def snapshot(self):
        if self.error:
            raise self.error
        with self.replica.lock:
            return set(self.replica.blocks)

    def snapshot_media(self):
        """medium -> set of block hashes (media with blocks only)."""
        if self.error:
            raise self.error
        with self.replica.lock:
            return self.replica.media_sets()

    def wait_for(self, predicate, timeout=10.0):
        """Waits until predicate(set of hashes) holds; returns the last set."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.snapshot()
            if predicate(s) or time.monotonic() > deadline:
                return s
            time.sleep(0.05)

    def wait_connects(self, count, timeout=10.0):
        """Waits until the SUB socket has connected count times in all, then
        a moment more for its subscription to reach the publisher."""
        deadline = time.monotonic() + timeout
        while self.connects < count:
            if self.error:
                raise self.error
            if time.monotonic() > deadline:
                raise ProtocolError(f"SUB socket connected {self.connects} times, waited for {count}")
            time.sleep(0.02)
        time.sleep(0.2)

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.sub.disable_monitor()
        self._monitor.close(linger=0)
        self.sub.close(linger=0)
        self.ctx.term()
