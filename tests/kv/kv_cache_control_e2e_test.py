"""Cache control end to end (issue 25): the real `kvfork serve` on loopback
with a small pool, so unpinned prefixes are evicted by a flood of unrelated
prompts while pinned ones stay:

  1. Anthropic /v1/messages with cache_control {"type": "ephemeral",
     "ttl": "1h"} on the system prompt: usage reports the pinned prefix as
     cache_creation_input_tokens, then, after the flood, as
     cache_read_input_tokens (all but its last partial block: only full
     blocks are cached and pinned); the same request without cache_control (another
     system prompt) is recomputed after the flood;
  2. POST /v1/cache/pin (admin key) pins a prompt for a tenant's key that a
     later completion with that key reads back after the flood; its errors name the field; a non-admin key
     gets 403;
  3. OpenAI prompt_cache_key: a salt-and-pin hint: the prompt survives the
     flood for requests with the same key, and a request without the key
     shares nothing with it;
  4. /metrics kvfork_kv_pinned_blocks and /v1/cache/stats pinned_blocks count
     the pins, and the KV check holds.
"""

import json
import os
import signal
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvfork_test_env import KVFORK, fail, free_port, make_tiny_model, start_server  # noqa: E402

ADMIN, USER = "admin-key-1", "user-key-1"


def call(port, method, path, body=None, key=ADMIN):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read().decode()
            return r.status, (json.loads(raw) if raw.startswith(("{", "[")) else raw)
    except urllib.error.HTTPError as e:
        raw = e.read().decode()
        return e.code, (json.loads(raw) if raw.startswith("{") else raw)



def text(tag, n):
    return " ".join(f"{tag} sentence {i} tells of item {i * 7} and its place" for i in range(n))


def flood(port, tag):
    """Unrelated prompts that cycle the whole unpinned part of the pool."""
    for i in range(10):
        code, body = call(port, "POST", "/v1/completions",
                          {"model": "tiny", "prompt": text(f"{tag}{i}", 22), "max_tokens": 1,
                           "temperature": 0}, key=USER)
        if code != 200:
            fail(f"flood: {code} {body}")


def messages(port, system, cache_control):
    block = {"type": "text", "text": system}
    if cache_control is not None:
        block["cache_control"] = cache_control
    code, body = call(port, "POST", "/v1/messages",
                      {"model": "tiny", "max_tokens": 2, "temperature": 0, "system": [block],
                       "messages": [{"role": "user", "content": "What is the item in sentence 3?"}]},
                      key=USER)
    if code != 200:
        fail(f"/v1/messages: {code} {body}")
    return body["usage"]


def completion(port, prompt, extra=None):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0}
    body.update(extra or {})
    code, out = call(port, "POST", "/v1/completions", body, key=USER)
    if code != 200:
        fail(f"completion: {code} {out}")
    return out["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) or 0


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(tmp, 5)
        port = free_port()
        log = open(os.path.join(tmp, "serve.log"), "w")
        proc = start_server([KVFORK, "serve", "--model", model, "--served-model-name", "tiny",
                             "--host", "127.0.0.1", "--port", str(port), "--threads", "1",
                             "--kv-backend", "paged", "--kv-blocks", "64",
                             "--max-num-seqs", "2", "--api-key", USER,
                             "--admin-api-key", ADMIN], port, log)
        try:
            # 1. Anthropic cache_control.
            pinned_system, plain_system = text("pinned", 9), text("plain", 9)
            first = messages(port, pinned_system, {"type": "ephemeral", "ttl": "1h"})
            total = first["input_tokens"] + first["cache_creation_input_tokens"] + \
                first["cache_read_input_tokens"]
            if first["cache_creation_input_tokens"] < 64 or first["cache_read_input_tokens"] != 0:
                fail(f"first cache_control request: {first}")
            messages(port, plain_system, None)
            flood(port, "a")
            again = messages(port, pinned_system, {"type": "ephemeral", "ttl": "1h"})
            if again["cache_read_input_tokens"] < first["cache_creation_input_tokens"] - 16 or \
                    again["cache_creation_input_tokens"] >= 16 or \
                    sum(again[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                           "cache_read_input_tokens")) != total:
                fail(f"the pinned system prompt was not read back after the flood: {first} -> {again}")
            plain = messages(port, plain_system, None)
            # (A few tokens of the template's opening may be copied from any
            # cached block that starts alike: less than one block.)
            if plain["cache_read_input_tokens"] >= 16:
                fail(f"the unpinned system prompt survived the flood (pool too big?): {plain}")
            print(f"cache_control: {first} -> after the flood {again}; unpinned {plain}", flush=True)
            code, err = call(port, "POST", "/v1/messages",
                             {"model": "tiny", "max_tokens": 2,
                              "system": [{"type": "text", "text": "x",
                                          "cache_control": {"type": "ephemeral", "ttl": "2h"}}],
                              "messages": [{"role": "user", "content": "hi"}]}, key=USER)
            if code != 400 or "system[0].cache_control.ttl" not in json.dumps(err):
                fail(f"a bad ttl: {code} {err}")

            # 2. The admin route.
            admin_prompt = text("admin", 9)
            # For the tenant of USER (keys salt their prefixes apart).
            code, pin = call(port, "POST", "/v1/cache/pin",
                             {"prompt": admin_prompt, "ttl_seconds": 600, "api_key": USER})
            if code != 200 or pin["pinned_blocks"] < 4 or pin["ttl_seconds"] != 600:
                fail(f"/v1/cache/pin: {code} {pin}")
            flood(port, "b")
            cached = completion(port, admin_prompt)
            if cached < pin["pinned_tokens"]:
                fail(f"admin pin: {cached} cached tokens after the flood, {pin['pinned_tokens']} pinned")
            for body, field in [({"prompt": "x", "ttl": "2h"}, "ttl"), ({"ttl": "5m"}, "prompt"),
                                ({"prompt": "x"}, "ttl"), ({"prompt": "x", "ttl": "5m", "n": 2}, "n"),
                                ({"prompt": [1, "a"], "ttl": "5m"}, "prompt[1]"),
                                ({"prompt": "x", "ttl": "5m", "api_key": "nope"}, "api_key")]:
                code, err = call(port, "POST", "/v1/cache/pin", body)
                if code != 400 or err["error"]["param"] != field:
                    fail(f"/v1/cache/pin {body}: {code} {err}, want a 400 naming {field}")
            code, _ = call(port, "POST", "/v1/cache/pin", {"prompt": "x", "ttl": "5m"}, key=USER)
            if code != 403:
                fail(f"/v1/cache/pin with a user key: {code}, want 403")

            # 3. prompt_cache_key.
            keyed = text("keyed", 9)
            completion(port, keyed, {"prompt_cache_key": "tenant-7"})
            flood(port, "c")
            cached = completion(port, keyed, {"prompt_cache_key": "tenant-7"})
            if cached < 64:
                fail(f"prompt_cache_key: {cached} cached tokens after the flood")
            if completion(port, keyed) != 0:
                fail("a request without the prompt_cache_key shared its prefix")

            # 4. Metrics and the check.
            code, stats = call(port, "GET", "/v1/cache/stats?check=1")
            if code != 200 or stats["kv_check"] != "ok" or stats["pinned_blocks"] < 12:
                fail(f"/v1/cache/stats: {code} {stats}")
            code, metrics = call(port, "GET", "/metrics")
            line = [l for l in metrics.splitlines() if l.startswith("kvfork_kv_pinned_blocks{")]
            if not line or float(line[0].split()[-1]) != stats["pinned_blocks"]:
                fail(f"/metrics kvfork_kv_pinned_blocks: {line}, stats {stats['pinned_blocks']}")
            print(f"pins: {stats['pinned_blocks']} blocks, {stats['pinned_evictions']} evicted early",
                  flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            log.close()
    print("PASS")


if __name__ == "__main__":
    main()
