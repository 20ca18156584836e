"""Holds N idle connections to a throng server, each past its first
exchange: with --websocket, the upgrade (101 read); without, one echoed
message. Prints `held N` once all are idle, then waits for stdin to close.
bench/ws-memory.sh reads the server's RSS at two such counts.

    ws_hold.py HOST PORT N [--websocket]
"""

import base64
import os
import socket
import sys


def upgraded(addr):
    s = socket.create_connection(addr)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (
            f"GET / HTTP/1.1\r\nHost: {addr[0]}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {key}\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            sys.exit("the server closed during the handshake")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        sys.exit(f"no 101: {head[:80]!r}")
    return s


def echoed(addr):
    s = socket.create_connection(addr)
    s.sendall(b"hello")
    got = b""
    while len(got) < 5:
        chunk = s.recv(64)
        if not chunk:
            sys.exit("the server closed before its echo")
        got += chunk
    return s


def main():
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    open_one = upgraded if "--websocket" in sys.argv else echoed
    held = [open_one((host, port)) for _ in range(n)]
    print(f"held {len(held)}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
