"""What the Python tests share: the paths ctest passes in the environment
(tests/CMakeLists.txt), a failure that ends the test, a free loopback port
and a JSON request to a kvfork server on loopback. Import it with
`sys.path.insert(0, <tests dir>)`."""

import json
import os
import socket
import sys
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
