"""The scripted model's timing: time to first token, tokens per second, jitter (docs/architecture.md "Streaming at scale").

Off by default (every chunk at once). With a rate, text and tool-call arguments are cut
into one token (TOKEN_CHARS characters) per chunk and sent on a schedule: the first token after the
time to first token, then one every 1/rate seconds with a uniform jitter. The schedule is absolute
(a late wake-up sends what is due without sleeping again), so a loaded event loop does not slow the
model down: it only delays the chunks, which is what a bench of the harness wants to see.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from scripted.settings import ScriptedSettings

TOKEN_CHARS = 4  # ~ one token of English text
STAMP = b"@ts@"  # replaced by the chunk's emit time when `stamp` is on (bench only)
PROFILES: dict[str, tuple[float, float, float]] = {  # ttft ms, tokens/s, jitter ms
    "instant": (0.0, 0.0, 0.0),
    "fast_gpt": (400.0, 80.0, 3.0),
}


@dataclass(frozen=True)
class Timing:
    ttft_s: float = 0.0
    tokens_per_s: float = 0.0
    jitter_s: float = 0.0
    stamp: bool = False

    @classmethod
    def from_settings(cls, s: ScriptedSettings) -> Timing:
        ttft, rate, jitter = PROFILES[s.profile]
        return cls(ttft_s=(s.ttft_ms if s.ttft_ms is not None else ttft) / 1000,
                   tokens_per_s=s.tokens_per_s if s.tokens_per_s is not None else rate,
                   jitter_s=(s.jitter_ms if s.jitter_ms is not None else jitter) / 1000,
                   stamp=s.stamp)

    @property
    def active(self) -> bool:
        return self.ttft_s > 0 or self.tokens_per_s > 0 or self.stamp

    def step(self, instant: int) -> int:
        """Characters per streamed delta: one token when paced, `instant` otherwise."""
        return TOKEN_CHARS if self.tokens_per_s > 0 else instant


def stamped(chunk: bytes, at: float | None = None) -> bytes:
    """`at`: the wall-clock time the chunk was due (default now). A due token also carries the time
    the model actually let it go (`<due>s<sent>`): bench-stream splits the added latency by hop, and a
    late model loop is then told apart from the harness."""
    if STAMP not in chunk:
        return chunk
    now = time.time()
    return chunk.replace(STAMP, (f"{now:.6f}" if at is None else f"{at:.6f}s{now:.6f}").encode())


async def paced(chunks: list[tuple[bytes, bool]], timing: Timing) -> AsyncIterator[bytes]:
    """Yield the chunks ((bytes, carries a token)); token chunks on the schedule, the others at once.
    Chunks already due when the loop gets here go out together, as one network read would return
    every event the server sent meanwhile (one yield per token would make a late consumer pay a
    wake-up per token on top of its backlog: not what a provider's TCP stream costs). A stamped token
    carries the time it was due: a provider sends on its schedule, so a late event loop here is
    latency the harness adds, not the model's."""
    start = time.monotonic()
    wall = time.time() - start  # monotonic -> wall clock
    due = start + timing.ttft_s
    interval = 1 / timing.tokens_per_s if timing.tokens_per_s > 0 else 0.0
    first = True
    ready: list[bytes] = []
    for chunk, token in chunks:
        at: float | None = None
        if token:
            if not first:
                due += interval
            first = False
            at = due + (random.uniform(-timing.jitter_s, timing.jitter_s) if timing.jitter_s else 0.0)
            if at > time.monotonic() and ready:
                yield b"".join(ready)
                ready = []
            wait = at - time.monotonic()  # after the yield: a consumer that read late finds it due already
            if wait > 0:
                await asyncio.sleep(wait)
        ready.append(stamped(chunk, None if at is None else wall + at) if timing.stamp else chunk)
    if ready:
        yield b"".join(ready)
