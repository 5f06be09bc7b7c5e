#!/usr/bin/env python3
"""Header-flood and chunked-body memory probe for `kvfork serve` (docs/server.md,
"Transport"). Sends N concurrent requests with ~13.9 MB of headers (or, with
--chunked MB, a chunked body of that size) to a running server and prints its
RSS before, its peak (VmHWM) and its RSS 3 s after, from /proc/PID/status.

  tools/http_probe/header_flood.py --pid PID --port PORT [--clients 4] [--chunked 48]
"""
import argparse
import socket
import threading
import time


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def flood(port, header_mb, chunked_mb, out):
    s = socket.create_connection(("127.0.0.1", port))
    try:
        if chunked_mb:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            payload = b'{"prompt": "' + b"word " * (chunked_mb * 1024 * 1024 // 5) + b'", "max_tokens": 1}'
            piece = 1 << 16
            for i in range(0, len(payload), piece):
                part = payload[i:i + piece]
                s.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        else:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            line = b"X-Flood-%07d: " + b"a" * 56 + b"\r\n"
            n = int(header_mb * 1024 * 1024) // len(line % 0)
            batch = b"".join(line % i for i in range(n))
            s.sendall(batch + b"\r\n")
    except OSError:
        pass  # the server closed early (a 431/413): what we hope for
    try:
        s.settimeout(30)
        out.append(s.recv(200).split(b"\r\n")[0].decode(errors="replace"))
    except OSError as e:
        out.append("no response: %s" % e)
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--header-mb", type=float, default=13.9)
    ap.add_argument("--chunked", type=int, default=0, help="send a chunked body of this many MB instead")
    a = ap.parse_args()
    before = status_kb(a.pid, "VmRSS")
    out = []
    t0 = time.time()
    ts = [threading.Thread(target=flood, args=(a.port, a.header_mb, a.chunked, out)) for _ in range(a.clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.time() - t0
    peak = status_kb(a.pid, "VmHWM")
    time.sleep(3)
    after = status_kb(a.pid, "VmRSS")
    print(f"clients={a.clients} {'chunked_mb=%d' % a.chunked if a.chunked else 'header_mb=%.1f' % a.header_mb} "
          f"rss_before_mb={before / 1024:.1f} peak_mb={peak / 1024:.1f} rss_after_3s_mb={after / 1024:.1f} "
          f"seconds={took:.2f} responses={sorted(set(out))}")


if __name__ == "__main__":
    main()
