"""A consumer process for the bus fault tests (SIGKILL / SIGTERM mid-handler).

    python -m tests.support.bus_consumer REDIS_URL STREAM PREFIX [--hang before|after|none] [--work-s S] [--window N]

It consumes `Wake` messages with `shared.streams.bus.subscribe` exactly as a service does. For each message the
handler records `started` (so the test knows it is mid-handler), optionally hangs, and applies an
idempotent effect: `once` (a SET NX of `keys.once`) gates an RPUSH to `{PREFIX}:effects`, so a redelivered entry whose
effect already happened is acked without repeating it. SIGTERM stops the broker gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

import redis.asyncio as aioredis

from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.streams.bus import by_session, ensure_group, make_broker, subscribe
from shared.telemetry.logging import configure_logging

GROUP = "faulty"


async def once(client: aioredis.Redis, scope: str, message_id: str, ttl_s: int = 7 * 24 * 3600) -> bool:
    """True the first time (scope, message_id) is seen: the idempotency gate for the effect."""
    return bool(await client.set(keys.once(scope, message_id), "1", nx=True, ex=ttl_s))


async def run(args: argparse.Namespace) -> None:
    log = configure_logging("bus-consumer")
    client = aioredis.from_url(args.redis_url)
    broker = make_broker(args.redis_url)
    prefix = args.prefix

    async def handle(wake: Wake) -> None:
        await client.rpush(f"{prefix}:started", f"{os.getpid()}:{wake.wake_id}")
        if args.hang == "before":
            await asyncio.sleep(3600)  # killed here: the effect never happened
        await asyncio.sleep(args.work_s)
        if await once(client, prefix, wake.wake_id):
            await client.rpush(f"{prefix}:effects", wake.wake_id)
        if args.hang == "after":
            await asyncio.sleep(3600)  # killed here: the effect happened, the ack did not
        await client.rpush(f"{prefix}:done", f"{os.getpid()}:{wake.wake_id}")

    subscribe(
        broker, client, stream=args.stream, group=GROUP, consumer=f"c-{os.getpid()}", model=Wake, handler=handle,
        claim_idle_ms=args.claim_idle_ms, max_deliveries=5, polling_interval_ms=100,
        **({"window": args.window, "batch_size": 1, "order_key": by_session} if args.window else {}),
    )
    # The handlers before the broker starts: its first handler can record `started` while `start` is
    # still awaited, and a test's SIGTERM then would meet the default action (killed, exit -15).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await ensure_group(client, args.stream, GROUP)
    await broker.start()
    await client.rpush(f"{prefix}:ready", str(os.getpid()))
    log.info("consumer_ready", pid=os.getpid())
    await stop.wait()
    log.info("consumer_stopping")
    await broker.stop()  # waits for the in-flight handler (graceful_timeout) before returning
    await client.rpush(f"{prefix}:stopped", str(os.getpid()))
    await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("redis_url")
    parser.add_argument("stream")
    parser.add_argument("prefix")
    parser.add_argument("--hang", choices=["before", "after", "none"], default="none")
    parser.add_argument("--work-s", type=float, default=0.0)
    parser.add_argument("--claim-idle-ms", type=int, default=1000)
    parser.add_argument("--window", type=int, default=0, help="a sliding window of entries in flight (0: batches)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
