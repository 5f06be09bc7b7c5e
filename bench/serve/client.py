"""A streaming OpenAI chat-completions client that times every chunk.

One request per connection (as a real client pool would open them), standard
library only. TTFT is measured from just before the request is sent to the
first chunk that carries generated text (content or reasoning_content); the
role-only first chunk does not count. Inter-token latencies are the gaps
between successive text chunks.
"""

import http.client
import json
import time


def chat_body(messages, max_tokens, logprobs=False):
    body = {
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if logprobs:
        # top_logprobs 1: llama.cpp sends no logprobs at all with 0.
        body["logprobs"] = True
        body["top_logprobs"] = 1
    return body


def stream_chat(port, body, timeout=1800.0):
    """Sends one streaming chat request; returns a dict of what happened.

    Keys: ok, error, status, t_send, ttft, e2e, itl (list of seconds),
    text, reasoning, usage, finish_reason, token_bytes (list of bytes objects
    when logprobs were asked, else None) and token_ids (ids where the server
    names them, else None entries).
    """
    r = {"ok": False, "error": None, "status": None, "ttft": None, "e2e": None, "itl": [],
         "text": "", "reasoning": "", "usage": None, "finish_reason": None,
         "token_bytes": [] if body.get("logprobs") else None, "token_ids": [], "chunks": 0}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t_send = time.monotonic()
    r["t_send"] = t_send
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        r["status"] = resp.status
        if resp.status != 200:
            r["error"] = f"HTTP {resp.status}: {resp.read()[:500].decode(errors='replace')}"
            return r
        last_text_t = None
        done = False
        while True:
            line = resp.readline()
            if not line:
                break
            now = time.monotonic()
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                r["error"] = f"error chunk: {json.dumps(chunk['error'])[:500]}"
                return r
            if chunk.get("usage"):
                r["usage"] = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                piece = delta.get("content") or ""
                thought = delta.get("reasoning_content") or ""
                if piece or thought:
                    r["chunks"] += 1
                    if last_text_t is None:
                        r["ttft"] = now - t_send
                    else:
                        r["itl"].append(now - last_text_t)
                    last_text_t = now
                r["text"] += piece
                r["reasoning"] += thought
                lp = choice.get("logprobs")
                if r["token_bytes"] is not None and lp and lp.get("content"):
                    for entry in lp["content"]:
                        raw = entry.get("bytes")
                        r["token_bytes"].append(bytes(raw) if raw is not None
                                                else entry.get("token", "").encode())
                        # llama.cpp also names the id; kvfork gives bytes only.
                        r["token_ids"].append(entry.get("id"))
                if choice.get("finish_reason"):
                    r["finish_reason"] = choice["finish_reason"]
        r["e2e"] = time.monotonic() - t_send
        if not done:
            r["error"] = "stream ended without data: [DONE]"
        elif r["usage"] is None:
            r["error"] = "stream had no usage chunk"
        elif r["finish_reason"] not in ("length", "stop"):
            r["error"] = f"finish_reason {r['finish_reason']!r}"
        else:
            r["ok"] = True
        return r
    except (OSError, http.client.HTTPException, ValueError) as e:
        r["error"] = f"{type(e).__name__}: {e}"
        r["e2e"] = time.monotonic() - t_send
        return r
    finally:
        conn.close()
