"""The proxy's ASGI stack per SSE event, without sockets: the real app (middlewares, error handlers,
the events route and its response) driven with a fake `send`; events offered to the client's fan-out
queue one at a time, as the fan-out does. Prints the Python frames between the route's generator and
the server's `send` for one event, and the CPU µs per event.

    REDIS_URL=redis://127.0.0.1:6411/0 python bench/sse_stack.py [--events 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import uvloop

from services.proxy.app import create_app
from services.proxy.liveness import owned_session
from services.proxy.rows import SessionRow, SessionState

SID = "s_stack"


def frames_to_server(depth: int = 40) -> list[str]:
    """The function names from the caller of the fake send outwards, up to the route's generator."""
    out: list[str] = []
    frame = sys._getframe(2)
    while frame is not None and len(out) < depth:
        out.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename.rsplit('/', 2)[-2]})")
        if frame.f_code.co_name in ("event_frames", "__call__") and "routes" in frame.f_code.co_filename:
            break
        frame = frame.f_back
    return out


async def run(events: int) -> None:
    app = create_app()
    row = SessionRow(id=SID, owner="alice", created_at=0, updated_at=0)
    app.dependency_overrides[owned_session] = lambda: SessionState(row=row, leased=True, running=True, fence=1)
    fanout = app.state.proxy.fanout
    await app.state.proxy.redis.delete(f"gamma:{SID}:events")
    got = asyncio.Event()
    chains: list[list[str]] = []
    bodies = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal bodies
        if message["type"] == "http.response.body" and message.get("body", b"").startswith(b"id: "):
            bodies += 1
            if not chains:
                chains.append(frames_to_server())
            got.set()

    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": f"/sessions/{SID}/events", "raw_path": b"",
             "root_path": "", "query_string": b"last_event_id=%24", "headers": [(b"host", b"x")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {}, "app": app}
    task = asyncio.ensure_future(app(scope, receive, send))
    while SID not in fanout._topics:  # noqa: ASYNC110 - the route subscribes in its own task
        await asyncio.sleep(0.01)
    sub = next(iter(fanout._topics[SID].subscribers))
    data = '{"type":"message_update","data":{"delta":"' + "x" * 40 + '"}}'
    cpu = time.process_time()
    for i in range(events):
        got.clear()
        sub.offer((f"{i + 1}-0", data, None))
        await got.wait()
    used = time.process_time() - cpu
    gone.set()
    await fanout.close()
    task.cancel()
    print("frames from the send's caller outwards, one event:")
    for name in chains[0]:
        print("   ", name)
    print(f"events {bodies}: {used / events * 1e6:.2f} µs CPU per event (fake send, queue wake included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20000)
    args = parser.parse_args()
    uvloop.run(run(args.events))


if __name__ == "__main__":
    main()
