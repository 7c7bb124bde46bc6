"""Causal order of live writes before prompts, the runtime's side (shared/streams/causal.py; docs/architecture.md
"Causal order").

- A prompt whose `after_seq` names changes still in flight is held (`admit`), after the wake barrier
  and before it is run, steered or queued; later prompts wait behind it (their order is kept). The
  digest is asked to flush (`FlushRequest`); its digests reach the inbox before its
  `ChangesSettled`, so they are queued before the prompt is let go (`on_settled`).
- Past GAMMA_CAUSAL_WAIT_MS (`expire`) the prompt goes on after a dirty marker for each ref still in
  flight; those changes leave the in-flight set (the next prompt does not wait for them again) and
  their real digest follows when the digest catches up, as its own update (its own source id).
- During a run, before the steering queue is read (after a tool batch, before the next model call),
  a write acknowledged meanwhile is waited for the same way (`before_steering`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from pydantic import BaseModel

from shared.contracts.base import new_id
from shared.contracts.streams.causal import FlushRequest
from shared.contracts.streams.inbox import Injection, UserPrompt
from shared.redis import keys
from shared.streams import causal
from shared.streams.inbox import InboxEntry

log = structlog.get_logger()
Publish = Callable[[str, BaseModel], Awaitable[None]]
Deliver = Callable[[Injection, str | None], Awaitable[None]]


class CausalGate:
    def __init__(self, sid: str, client: Any, publish: Publish, wait_ms: int) -> None:
        self.sid = sid
        self.client = client
        self._publish = publish
        self.wait_s = wait_ms / 1000
        self.enabled = wait_ms > 0 and client is not None  # no Redis (an in-process test): no wait
        self.settled = 0  # every change numbered up to this is delivered (or given up on)
        self.held: list[InboxEntry] = []  # prompts waiting, in arrival order
        self.deadline: float | None = None  # loop time when the first held prompt stops waiting
        self._advanced = asyncio.Event()

    @staticmethod
    def _upto(entry: InboxEntry) -> int | None:
        m = entry.message
        return m.after_seq if isinstance(m, UserPrompt) else None

    async def admit(self, entry: InboxEntry, prompt: UserPrompt) -> bool:
        """True: handle the prompt now. False: held until its changes are settled or the wait ends."""
        if not self.enabled:
            return True
        if self.held:
            self.held.append(entry)  # behind an earlier prompt: never overtakes it
            return False
        upto = prompt.after_seq
        if upto is None or not await self._flush_needed(upto):
            return True
        self.held.append(entry)
        self.deadline = asyncio.get_running_loop().time() + self.wait_s
        log.info("causal_prompt_held", session_id=self.sid, prompt_id=prompt.prompt_id, after_seq=upto)
        return False

    async def _flush_needed(self, upto: int) -> bool:
        """Ask the digest to flush the changes numbered up to `upto`, unless settled already.

        Settled means a `ChangesSettled` covering `upto` was read from the inbox, and no change up to
        `upto` is in the set (one may have entered it after that flush: two proxies, INCR then ZADD).
        An empty set alone is not enough: the digest removes a change once its update is appended to
        the inbox, which may be after this prompt's entry, not yet read. Its `ChangesSettled` comes
        after that update, so waiting for it keeps the order."""
        if upto <= self.settled and not await causal.in_flight(self.client, self.sid, upto):
            return False
        await self._publish(keys.DIGEST_FLUSH, FlushRequest(session_id=self.sid, upto=upto))
        return True

    def _advance(self, upto: int) -> None:
        if upto > self.settled:
            self.settled = upto
            self._advanced.set()
            self._advanced = asyncio.Event()

    def on_settled(self, upto: int) -> list[InboxEntry]:
        """The digest's `ChangesSettled`: the prompts that may go on now (to be handled again, in order)."""
        self._advance(upto)
        head = self._upto(self.held[0]) if self.held else None
        if not self.held or (head is not None and head > self.settled):
            return []
        return self._release()

    def _release(self) -> list[InboxEntry]:
        out, self.held, self.deadline = self.held, [], None
        return out

    def timeout(self) -> float | None:
        """Seconds until the first held prompt stops waiting; None when none is held."""
        if self.deadline is None:
            return None
        return max(self.deadline - asyncio.get_running_loop().time(), 0.0)

    def postpone(self, seconds: float) -> None:
        """Try the expiry again after `seconds` (it failed: the prompts stay held, in order)."""
        if self.held:
            self.deadline = asyncio.get_running_loop().time() + seconds

    async def expire(self) -> tuple[list[Injection], list[InboxEntry]]:
        """Past the wait: dirty markers for the refs still in flight, and the prompts to go on."""
        if self.deadline is None or asyncio.get_running_loop().time() < self.deadline or not self.held:
            return [], []
        head = self.held[0]
        upto = self._upto(head) or self.settled
        waited_for = head.message.prompt_id if isinstance(head.message, UserPrompt) else new_id("w_")
        markers = await self._give_up(upto, waited_for)
        return markers, self._release()

    async def _give_up(self, upto: int, waited_for: str) -> list[Injection]:
        left = await causal.in_flight(self.client, self.sid, upto)
        await causal.settle(self.client, self.sid, left)
        self._advance(upto)
        refs = list(dict.fromkeys(ref for _, ref in left))
        log.warning("causal_wait_timeout", session_id=self.sid, upto=upto, refs=refs, waited_for=waited_for)
        return [causal.dirty_marker(self.sid, ref, waited_for) for ref in refs]

    async def before_steering(self) -> list[Injection]:
        """During a run: wait (bounded) for the digests of writes acknowledged so far; returns the dirty
        markers to steer in when the wait ran out."""
        if not self.enabled:
            return []
        upto = await causal.watermark(self.client, self.sid)  # one round trip; None: the common case
        if upto is None or not await self._flush_needed(upto):
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while self.settled < upto:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return await self._give_up(upto, new_id("w_"))
            advanced = self._advanced
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(advanced.wait(), remaining)
        return []


def causal_wait(gate: CausalGate, deliver: Deliver) -> Callable[[], Awaitable[None]]:
    """The Agent's `before_steering` hook: the wait for the digests of writes acknowledged so far, the
    markers of a wait that ran out delivered (steered) before the steering is read."""

    async def before_steering() -> None:
        for marker in await gate.before_steering():
            await deliver(marker, None)

    return before_steering
