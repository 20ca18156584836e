"""A WebSocket server on Python's `websockets` library (Debian's
python3-websockets), independent of throng: the peer that throng's client
side is checked against. It prints `listening PORT` once bound (127.0.0.1,
a free port), serves until its stdin closes, then prints what it counted
(`messages N`, `connections N`) and exits.

    ws_server.py echo          every message sent back as it came
    ws_server.py push PERIOD   to each client, every PERIOD seconds, a text
                               message `SEQ tick` (SEQ from 0 per client)
"""

import asyncio
import sys

import websockets

counts = {"messages": 0, "connections": 0}


async def echo(ws, *_):
    counts["connections"] += 1
    try:
        async for msg in ws:
            counts["messages"] += 1
            await ws.send(msg)
    except websockets.ConnectionClosed:
        pass  # a close with a code other than 1000 or 1001


def pusher(period):
    async def push(ws, *_):
        counts["connections"] += 1
        seq = 0
        loop = asyncio.get_running_loop()
        due = loop.time()
        try:
            while True:
                await ws.send(f"{seq} tick")
                counts["messages"] += 1
                seq += 1
                due += period
                await asyncio.sleep(max(0.0, due - loop.time()))
        except websockets.ConnectionClosed:
            pass

    return push


async def main():
    handler = echo if sys.argv[1] == "echo" else pusher(float(sys.argv[2]))
    async with websockets.serve(handler, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"listening {port}", flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)
    for k, v in counts.items():
        print(f"{k} {v}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
