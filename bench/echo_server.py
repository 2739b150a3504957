"""The physical floor: a raw ``websockets`` echo server. ``python bench/echo_server.py PORT``."""

from __future__ import annotations

import asyncio
import sys

from websockets.asyncio.server import serve


async def echo(ws) -> None:
    async for message in ws:
        await ws.send(message)


async def main(port: int) -> None:
    async with serve(echo, "127.0.0.1", port, max_size=None, compression=None):
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
