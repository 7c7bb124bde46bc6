"""A minimal SSE client on a raw socket: hundreds of them are cheap. One that stops reading is a slow
client once what buffers for it fills: its stream reader (up to twice `limit`) and the kernel's
socket buffers, which autotune up to `net.ipv4.tcp_rmem`'s maximum (32 MB on some hosts: more than a
test sends) unless `rcvbuf` fixes the receive buffer's size."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field

from tests.support.stack import API_TOKEN


@dataclass
class SseClient:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    status: int
    ids: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    ended: bool = False

    async def next_block(self, wait_s: float) -> str | None:
        """The next SSE block (chunked transfer decoded loosely: size lines are skipped)."""
        lines: list[str] = []
        while True:
            raw = await asyncio.wait_for(self.reader.readline(), wait_s)
            if not raw:
                self.ended = True
                return "\n".join(lines) if lines else None
            line = raw.decode(errors="replace").rstrip("\r\n")
            if _chunk_size(line):
                continue
            if line == "":
                if lines:
                    return "\n".join(lines)
                continue
            lines.append(line)

    async def collect(self, wait_s: float, until_ids: int | None = None, until_comments: int | None = None) -> None:
        """Read blocks until the wanted counts are reached, the stream ends or `timeout` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while not self.ended:
            if until_ids is not None and len(self.ids) >= until_ids:
                return
            if until_comments is not None and len(self.comments) >= until_comments:
                return
            left = deadline - loop.time()
            if left <= 0:
                return
            try:
                block = await self.next_block(left)
            except TimeoutError:
                return
            if block is None:
                return
            for line in block.split("\n"):
                if line.startswith("id: "):
                    self.ids.append(line[4:])
                elif line.startswith(":"):
                    self.comments.append(line[1:].strip())

    def close(self) -> None:
        self.writer.close()


def _chunk_size(line: str) -> bool:
    return bool(line) and len(line) <= 8 and all(c in "0123456789abcdefABCDEF" for c in line)


async def open_sse(port: int, sid: str, last_event_id: str | None = None, token: str = API_TOKEN,
                   rcvbuf: int | None = None, limit: int = 1 << 20) -> SseClient:
    if rcvbuf is None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=limit)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: the window it offers
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=limit)
    extra = f"Last-Event-ID: {last_event_id}\r\n" if last_event_id else ""
    writer.write(f"GET /sessions/{sid}/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                 f"Accept: text/event-stream\r\n{extra}\r\n".encode())
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 30)
    status = int(status_line.split()[1])
    while (await asyncio.wait_for(reader.readline(), 30)) not in (b"\r\n", b""):
        pass  # headers
    return SseClient(reader=reader, writer=writer, status=status)
