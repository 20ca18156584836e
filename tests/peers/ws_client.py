"""A WebSocket peer for tests/websocket_server.rs, on Python's `websockets`
library (Debian's python3-websockets): an implementation independent of
throng's. Each mode prints what it saw, one fact a line, and exits 0 only
when every check held.

    ws_client.py echo PORT [CA]  text, binary, fragmented, ping, close 4001
                                 (with CA: over TLS, wss://, trusting CA)
    ws_client.py push PORT N     N pushed messages: their leading numbers
    ws_client.py violate PORT    an unmasked frame on a raw socket: the
                                 server's close 1002 and the end of that
                                 connection, while another one still echoes
    ws_client.py refuse PORT     a GET without Upgrade: the server's 400
"""

import asyncio
import base64
import os
import socket
import ssl
import sys

import websockets


def uri(port):
    return f"ws://127.0.0.1:{port}/"


async def echo(port, ca=None):
    if ca is None:
        connecting = websockets.connect(uri(port), compression=None)
    else:
        ctx = ssl.create_default_context(cafile=ca)
        connecting = websockets.connect(f"wss://localhost:{port}/", ssl=ctx, compression=None)
    async with connecting as ws:
        await ws.send("hello, throng")
        got = await ws.recv()
        assert got == "hello, throng", got
        print("text echoed")
        data = bytes(range(256)) * 300
        await ws.send(data)
        got = await ws.recv()
        assert got == data and isinstance(got, bytes), len(got)
        print("binary echoed", len(got))
        await ws.send(["frag", "mented ", "message"])
        got = await ws.recv()
        assert got == "fragmented message", got
        print("fragmented echoed")
        waiter = await ws.ping(b"are you there")
        await asyncio.wait_for(waiter, 5)
        print("pong received")
        await ws.close(code=4001, reason="done")
        assert ws.close_code == 4001, ws.close_code
        print("closed", ws.close_code)


async def push(port, n):
    async with websockets.connect(uri(port), compression=None) as ws:
        seqs = []
        while len(seqs) < n:
            msg = await asyncio.wait_for(ws.recv(), 5)
            assert isinstance(msg, str), type(msg)
            seqs.append(int(msg.split(" ", 1)[0]))
        print("received", " ".join(map(str, seqs)))
        await ws.close()


def raw_upgrade(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Key: {key}\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        assert chunk, "closed during the handshake"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return s, head.split(b"\r\n\r\n", 1)[1]


def read_all(s):
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            return data
        data += chunk


async def violate(port):
    async with websockets.connect(uri(port), compression=None) as good:
        await good.send("before")
        assert await good.recv() == "before"
        bad, rest = raw_upgrade(port)
        # A text frame without the mask bit: a client must mask.
        bad.sendall(b"\x81\x02hi")
        data = rest + read_all(bad)
        assert data == b"\x88\x02\x03\xea", data
        print("unmasked frame closed with 1002 and the connection ended")
        await good.send("after")
        assert await good.recv() == "after"
        print("the other connection still echoes")


def refuse(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    data = read_all(s)
    assert data.startswith(b"HTTP/1.1 400 "), data
    print("plain GET refused with 400")


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "echo":
        asyncio.run(echo(port, sys.argv[3] if len(sys.argv) > 3 else None))
    elif mode == "push":
        asyncio.run(push(port, int(sys.argv[3])))
    elif mode == "violate":
        asyncio.run(violate(port))
    elif mode == "refuse":
        refuse(port)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
