"""What the Python tests share: the paths ctest passes in the environment
(tests/CMakeLists.txt), a failure that ends the test, a free loopback port,
a JSON request to a kvfork server on loopback, a tiny random model and a
server started until it is healthy. Import it with
`sys.path.insert(0, <tests dir>)`."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

SRC = os.environ.get("KVFORK_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("KVFORK_BUILD_DIR", os.path.join(SRC, "build/release"))
KVFORK = os.environ.get("KVFORK_BIN", os.path.join(BUILD, "src/cli/kvfork"))
CACHE = os.environ.get("KVFORK_CACHE_DIR", os.path.join(SRC, ".cache"))
QWEN_TOKENIZER = os.path.join(CACHE, "npm/tokenizer-qwen3/package/models")


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, method, path, body=None, timeout=60):
    """(status, parsed JSON or text); an HTTP error status is returned, not
    raised; a connection error raises OSError."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            return r.status, (json.loads(raw) if raw.startswith(("{", "[")) else raw)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def make_tiny_model(tmp, seed, arch="qwen3", tokenizer=QWEN_TOKENIZER):
    """`kvfork make-model` of the tiny shape into tmp/tiny; its path."""
    d = os.path.join(tmp, "tiny")
    p = subprocess.run([KVFORK, "make-model", "--arch", arch, "--shape", "tiny", "--seed", str(seed),
                        "--tokenizer", tokenizer, "--out", d], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"make-model exited {p.returncode}: {p.stderr[-2000:]}")
    return d


def start_server(cmd, port, log, timeout=60):
    """Starts cmd (a kvfork serve command line listening on port), its output
    to log, and waits until GET /health answers 200; fails the test if the
    process exits first or the time runs out. Returns the process."""
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"server exited {proc.returncode} while starting")
        try:
            if http(port, "GET", "/health", timeout=2)[0] == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    fail(f"server not ready in {timeout} s")
