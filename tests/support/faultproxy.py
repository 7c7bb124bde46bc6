"""A TCP fault proxy for the network-fault tests (no toxiproxy binary here): it sits between the
services and Redis and injects what a real network does to them.

Faults, each switchable while traffic flows:
- latency (and jitter): every chunk Redis sends back is delivered `latency ± jitter` after it was
  read, in order (a chunk never overtakes the one before it), so a round trip costs that much more
  (toxiproxy's latency toxic on the downstream direction);
- reset: every open connection is closed with an RST on both sides (SO_LINGER 0);
- half-open: the connections open now stop forwarding and are never closed (what a dead NAT entry or
  a peer that vanished without a FIN looks like from the client); new connections work;
- muted replies: the connections open now still carry commands to Redis, but what Redis answers is
  dropped (with a reset after it: a reply Redis sent and the client never read);
- partition: for N seconds nothing is forwarded on any connection, old or new (bytes wait, as TCP's
  retransmissions would deliver them), new connections are accepted and wait too; then it heals.

It stops by itself after `lifetime_s` (every connection closed, the listener too), so a test that
dies cannot leave it running. Runs on a loop of its own in a thread (`start()`), or as a process:
`python -m tests.support.faultproxy --upstream 127.0.0.1:6379 --latency-ms 50 --lifetime-s 600`.
Loopback only: it listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")
CHUNK = 65536


@dataclass(eq=False)
class Link:
    """One client connection and its upstream twin."""
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    dead: bool = False  # half-open: never forwards again, never closed by the proxy
    muted: bool = False  # Redis's replies are dropped, the client's commands still go through
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


@dataclass
class Counters:
    accepted: int = 0
    resets: int = 0
    half_opened: int = 0
    partitions: int = 0
    bytes_forwarded: int = 0
    bytes_dropped: int = 0  # replies of muted connections


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, listen_port: int = 0, lifetime_s: float = 300.0,
                 seed: int = 0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.listen_port = listen_port
        self.lifetime_s = lifetime_s
        self.rng = random.Random(seed)
        self.latency_s = 0.0
        self.jitter_s = 0.0
        self.counters = Counters()
        self.links: set[Link] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._healed: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    # ------------------------------------------------------------ control (thread-safe)

    @property
    def port(self) -> int:
        return self.listen_port

    def start(self) -> FaultProxy:
        """On a loop of its own, in a daemon thread; returns once it listens."""
        listening = threading.Event()

        def run() -> None:
            asyncio.run(self.serve(listening.set))

        self._thread = threading.Thread(target=run, daemon=True, name=f"faultproxy-{self.upstream[1]}")
        self._thread.start()
        if not listening.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def stop(self) -> None:
        if self.loop is not None and not self._stopped.is_set():
            with contextlib.suppress(RuntimeError):  # the loop already ended (lifetime)
                self._call(self._shutdown)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def set_latency(self, latency_ms: float, jitter_ms: float = 0.0) -> None:
        self._call(lambda: self._set_latency(latency_ms / 1000, jitter_ms / 1000))

    def reset(self) -> int:
        """RST every open connection; returns how many."""
        return self._call(self._reset_all)

    def half_open(self) -> int:
        """Stall every open connection for good (no close); returns how many."""
        return self._call(self._half_open_all)

    def mute_replies(self) -> int:
        """Drop every reply on the connections open now (commands still reach Redis); returns how many."""
        return self._call(self._mute_all)

    def partition(self) -> None:
        self._call(self._partition)

    def heal(self) -> None:
        self._call(self._heal)

    def _call(self, fn: Callable[[], T]) -> T:
        assert self.loop is not None
        if self._stopped.is_set():
            raise RuntimeError("the fault proxy has stopped")

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=10)

    # ------------------------------------------------------------ the loop

    async def serve(self, on_listening: Callable[[], None] = lambda: None) -> None:
        self.loop = asyncio.get_running_loop()
        self._healed = asyncio.Event()
        self._healed.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.listen_port)
        self.listen_port = self._server.sockets[0].getsockname()[1]
        on_listening()
        try:
            await asyncio.wait_for(self._server.serve_forever(), timeout=self.lifetime_s)
        except (TimeoutError, asyncio.CancelledError):
            pass
        finally:
            self._shutdown()
            self._stopped.set()

    def _set_latency(self, latency_s: float, jitter_s: float) -> None:
        self.latency_s, self.jitter_s = latency_s, jitter_s

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for link in list(self.links):
            self._close(link, rst=False)
        assert self.loop is not None
        for task in asyncio.all_tasks(self.loop):
            if task is not asyncio.current_task():
                task.cancel()

    def _reset_all(self) -> int:
        n = 0
        for link in list(self.links):
            if not link.dead:
                self._close(link, rst=True)
                n += 1
        self.counters.resets += n
        return n

    def _half_open_all(self) -> int:
        n = 0
        for link in self.links:
            if not link.dead:
                link.dead = True
                n += 1
        self.counters.half_opened += n
        return n

    def _mute_all(self) -> int:
        live = [link for link in self.links if not link.dead]
        for link in live:
            link.muted = True
        return len(live)

    def _partition(self) -> None:
        assert self._healed is not None
        self._healed.clear()
        self.counters.partitions += 1

    def _heal(self) -> None:
        assert self._healed is not None
        self._healed.set()

    def _close(self, link: Link, *, rst: bool) -> None:
        self.links.discard(link)
        for task in link.tasks:
            task.cancel()
        for writer in (link.client, link.upstream):
            if writer is None:
                continue
            sock = writer.get_extra_info("socket")
            if rst and sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(Exception):
                writer.transport.abort() if rst else writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counters.accepted += 1
        link = Link(client=writer)
        self.links.add(link)
        assert self._healed is not None
        try:
            await self._healed.wait()  # a partition: the handshake's SYN would not get through either
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except (OSError, asyncio.CancelledError):
            self._close(link, rst=True)
            return
        link.upstream = up_writer
        if link.dead or link not in self.links:
            return
        link.tasks = [asyncio.ensure_future(self._pipe(link, reader, up_writer, delayed=False)),
                      asyncio.ensure_future(self._pipe(link, up_reader, writer, delayed=True))]

    async def _pipe(self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                    delayed: bool) -> None:
        """Read chunks and deliver each one after its delay, in order (a queue per direction)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        deliver = asyncio.ensure_future(self._deliver(link, queue, writer, downstream=delayed))
        link.tasks.append(deliver)
        last_due = 0.0
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                due = time.monotonic() + (self._delay() if delayed else 0.0)
                last_due = max(last_due, due)
                queue.put_nowait((last_due, data))
            queue.put_nowait((last_due, b""))  # EOF after everything before it
        except (OSError, asyncio.CancelledError):
            pass

    def _delay(self) -> float:
        if self.latency_s <= 0 and self.jitter_s <= 0:
            return 0.0
        return max(0.0, self.latency_s + self.rng.uniform(-self.jitter_s, self.jitter_s))

    async def _deliver(self, link: Link, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter, *,
                       downstream: bool) -> None:
        assert self._healed is not None
        try:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._healed.wait()
                if link.dead:
                    continue  # swallowed: the peer never hears of it, nor of a close
                if link.muted and downstream and data:
                    self.counters.bytes_dropped += len(data)
                    continue
                if not data:
                    self._close(link, rst=False)
                    return
                writer.write(data)
                self.counters.bytes_forwarded += len(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            if not link.dead:
                self._close(link, rst=True)


def proxy_for(redis_url: str, lifetime_s: float = 60.0) -> tuple[FaultProxy, str]:
    """A started proxy in front of `redis_url`'s Redis, and the URL (same db) that goes through it."""
    url = urlsplit(redis_url)
    proxy = FaultProxy(url.hostname or "127.0.0.1", url.port or 6379, lifetime_s=lifetime_s).start()
    return proxy, f"redis://127.0.0.1:{proxy.port}{url.path}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port of Redis")
    parser.add_argument("--listen-port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--toggle-latency-ms", type=float, default=None,
                        help="SIGUSR1 switches the latency between --latency-ms and this (a benchmark's phases)")
    parser.add_argument("--lifetime-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    proxy = FaultProxy(host, int(port), listen_port=args.listen_port, lifetime_s=args.lifetime_s)
    proxy._set_latency(args.latency_ms / 1000, args.jitter_ms / 1000)
    levels = [args.latency_ms / 1000, (args.toggle_latency_ms or 0.0) / 1000]

    def toggle() -> None:
        levels.reverse()
        proxy._set_latency(levels[0], args.jitter_ms / 1000)
        print(f"latency {levels[0] * 1000:g} ms", flush=True)

    def listening() -> None:
        if args.toggle_latency_ms is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, toggle)
        print(f"listening 127.0.0.1:{proxy.listen_port} -> {args.upstream}", flush=True)

    asyncio.run(proxy.serve(listening))


if __name__ == "__main__":
    main()
