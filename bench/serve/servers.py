"""The servers under test: one fresh process per scenario, on a loopback port.

ServerProcess starts kvfork or llama.cpp's llama-server, waits for /health,
samples the process's RSS (and, for kvfork, /v1/cache/stats) every 100 ms on
a background thread, and stops the process (SIGTERM, then SIGKILL after a
grace period). Everything a server writes goes to a log file.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

# One row per configuration the benchmark knows. "kind" picks the launcher;
# "flags" are added to kvfork's command line.
CONFIGS = {
    "kvfork-paged": {"kind": "kvfork", "flags": ["--kv-backend", "paged", "--prefix-tail-copy", "on"],
                     "label": "kvfork paged (tail copy on)"},
    "kvfork-notail": {"kind": "kvfork", "flags": ["--kv-backend", "paged", "--prefix-tail-copy", "off"],
                      "label": "kvfork paged (tail copy off)"},
    "kvfork-dense": {"kind": "kvfork", "flags": ["--kv-backend", "dense"],
                     "label": "kvfork dense"},
    "kvfork-noprefix": {"kind": "kvfork", "flags": ["--kv-backend", "paged", "--no-prefix-cache"],
                        "label": "kvfork prefix cache off"},
    # Not run by default: the step budget off, to show what it changes.
    "kvfork-stepoff": {"kind": "kvfork", "flags": ["--kv-backend", "paged", "--max-step-ms", "off"],
                       "label": "kvfork paged, --max-step-ms off", "default": False},
    "llama.cpp": {"kind": "llama", "flags": [], "label": "llama.cpp llama-server"},
    # llama.cpp at its best for shared prefixes, with the features its server
    # docs name for it: one KV buffer shared by all slots, idle slots saved to
    # the host-memory prompt cache (so a new request can restore a prefix
    # another slot computed), KV shifting to reuse chunks of 256+ tokens, and
    # an 8 GiB prompt cache.
    "llama.cpp-best": {"kind": "llama",
                       "flags": ["--kv-unified", "--cache-idle-slots", "--cache-reuse", "256",
                                 "--cache-ram", "8192"],
                       "label": "llama.cpp llama-server (kv-unified, cache-idle-slots, cache-reuse 256, cache-ram 8192)"},
}

# kvfork paged with a quantized KV cache, one configuration per format
# ("kvfork-int8"): the same flags as kvfork-paged plus --kv-dtype. Not run by
# default; smallpool_burst is where they differ (more tokens in one pool).
QUANTIZED_KV = ["int8", "q4", "q4r"]
for _dtype in QUANTIZED_KV:
    CONFIGS[f"kvfork-{_dtype}"] = {
        "kind": "kvfork", "kv_dtype": _dtype, "default": False,
        "flags": CONFIGS["kvfork-paged"]["flags"] + ["--kv-dtype", _dtype],
        "label": f"kvfork paged, KV {_dtype}"}


def is_paged_kvfork(config_name):
    """A kvfork configuration with the paged backend (one shared KV pool)."""
    c = CONFIGS[config_name]
    return c["kind"] == "kvfork" and "paged" in c["flags"]


# What --servers runs when not given.
DEFAULT_SERVERS = [name for name, c in CONFIGS.items() if c.get("default", True)]

SAMPLE_SECONDS = 0.1


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(port, method, path, body=None, timeout=30.0):
    """One request on a fresh connection; returns (status, parsed JSON or text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw.decode(errors="replace")
    finally:
        conn.close()


def read_proc_status(pid):
    """VmRSS and VmHWM of pid in bytes, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return None
    out = {}
    for key in ("VmRSS", "VmHWM"):
        m = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
        out[key] = int(m.group(1)) * 1024 if m else 0
    return out


class Sampler(threading.Thread):
    """Samples RSS (and kvfork's KV bytes) every 100 ms until stop()."""

    def __init__(self, pid, port, poll_kv):
        super().__init__(daemon=True)
        self.pid, self.port, self.poll_kv = pid, port, poll_kv
        self.samples = []  # (t, rss, hwm, kv_used_bytes, kv_used_or_cached_bytes)
        self._halt = threading.Event()
        self.kv_errors = 0

    def run(self):
        while not self._halt.is_set():
            t = time.monotonic()
            st = read_proc_status(self.pid)
            if st is None:
                break
            used = held = None
            if self.poll_kv:
                try:
                    code, s = http_json(self.port, "GET", "/v1/cache/stats", timeout=5.0)
                    if code == 200:
                        used = s["blocks_used"] * s["block_bytes"]
                        held = (s["blocks_used"] + s["blocks_cached"]) * s["block_bytes"]
                    else:
                        self.kv_errors += 1
                except (OSError, http.client.HTTPException, KeyError):
                    self.kv_errors += 1
            self.samples.append((t, st["VmRSS"], st["VmHWM"], used, held))
            self._halt.wait(max(0.0, SAMPLE_SECONDS - (time.monotonic() - t)))

    def stop(self):
        self._halt.set()
        self.join(timeout=10)

    def window(self, t0, t1):
        return [s for s in self.samples if t0 <= s[0] <= t1]


class ServerProcess:
    """A server under test. Use as a context manager: start, wait ready, stop."""

    def __init__(self, config_name, model, threads, log_path, kvfork_bin=None, llama_bin=None,
                 max_model_len=0, kv_cache_mib=0, parallel=8):
        self.name = config_name
        self.config = CONFIGS[config_name]
        self.kind = self.config["kind"]
        self.model = model
        self.threads = threads
        self.log_path = log_path
        self.kvfork_bin, self.llama_bin = kvfork_bin, llama_bin
        self.max_model_len, self.kv_cache_mib, self.parallel = max_model_len, kv_cache_mib, parallel
        self.port = free_port()
        self.proc = None
        self.sampler = None
        self.start_seconds = None

    def command(self):
        if self.kind == "kvfork":
            cmd = [self.kvfork_bin, "serve", "--model", self.model["dir"], "--host", "127.0.0.1",
                   "--port", str(self.port), "--threads", str(self.threads),
                   "--max-num-seqs", str(self.parallel)]
            if self.max_model_len:
                cmd += ["--max-model-len", str(self.max_model_len)]
            if self.kv_cache_mib:
                cmd += ["--kv-cache-mib", str(self.kv_cache_mib)]
            return cmd + self.config["flags"]
        # llama.cpp with its defaults (cache_prompt on, --cache-ram default)
        # plus the configuration's flags, except slots, threads and the context: left unset, this version asks
        # for n_ctx_train per slot (8 x 40960 tokens for Qwen3-0.6B, 35 GiB of
        # KV) and shrinks it to the free host memory, so every slot gets
        # max_model_len tokens, the same as each kvfork request.
        return [self.llama_bin, "-m", self.model["gguf"], "--host", "127.0.0.1",
                "--port", str(self.port), "-t", str(self.threads), "-tb", str(self.threads),
                "-np", str(self.parallel), "-c", str(self.llama_context_tokens())] + self.config["flags"]

    def llama_context_tokens(self):
        return self.parallel * (self.max_model_len or self.model["context"] // self.parallel)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout=900.0):
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self.log = open(self.log_path, "w")
        self.log.write(" ".join(self.command()) + "\n")
        self.log.flush()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.command(), stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.sampler = Sampler(self.proc.pid, self.port, poll_kv=False)
        self.sampler.start()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before it was "
                                   f"ready; see {self.log_path}:\n{self.log_tail()}")
            try:
                code, _ = http_json(self.port, "GET", "/health", timeout=5.0)
                if code == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() - t0 > timeout:
                self.stop()
                raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s; see {self.log_path}")
            time.sleep(0.1)
        self.start_seconds = time.monotonic() - t0
        if self.kind == "kvfork":
            # The sampler that also polls KV bytes starts once the routes answer.
            self.sampler.stop()
            old = self.sampler.samples
            self.sampler = Sampler(self.proc.pid, self.port, poll_kv=True)
            self.sampler.samples = old
            self.sampler.start()

    def stop(self, grace=60.0):
        if self.sampler is not None:
            self.sampler.stop()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None) is not None and not self.log.closed:
            self.log.close()

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def cache_stats(self):
        if self.kind != "kvfork":
            return None
        code, s = http_json(self.port, "GET", "/v1/cache/stats")
        return s if code == 200 else None

    def llama_slot_tokens(self):
        """Tokens each llama.cpp slot holds in its KV cache now (GET /slots), or None."""
        if self.kind != "llama":
            return None
        try:
            code, slots = http_json(self.port, "GET", "/slots")
        except (OSError, http.client.HTTPException):
            return None
        if code != 200 or not isinstance(slots, list):
            return None
        return [s.get("n_prompt_tokens", 0) for s in slots]

    def llama_kv_allocated_bytes(self):
        """llama.cpp's KV buffer: -c tokens x the model's K+V bytes per token (f16 K and V
        by default, as many bytes as kvfork's bf16); allocated whole at start."""
        return self.llama_context_tokens() * self.model["kv_bytes_per_token"]

    def llama_context(self):
        """(n_ctx, n_ctx_seq) from llama.cpp's log, or (None, None)."""
        try:
            with open(self.log_path, errors="replace") as f:
                text = f.read()
        except OSError:
            return None, None
        n_ctx = re.search(r"n_ctx\s*=\s*(\d+)", text)
        n_seq = re.search(r"n_ctx_seq\s*=\s*(\d+)", text) or re.search(r"n_ctx_slot\s*=\s*(\d+)", text)
        return (int(n_ctx.group(1)) if n_ctx else None, int(n_seq.group(1)) if n_seq else None)
