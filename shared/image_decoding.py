"""Image decoding as the proxy (attachments) and the runtime (`read`, `show_file look`) do it, bounded
(docs/architecture.md "Images", "Bounded work").

- Off the event loop, in worker processes (shared/offload.py) of bounded address space: a decode
  cannot stall the sessions the process serves, and cannot take the process's memory with it.
- At most `workers` decodes in flight per process; a decode that waits past `queue_wait_s` for one is
  refused as busy (503: try again). At most `per_user` in flight per user; past a short wait, 429.
- Past `timeout_s` a decode's worker is killed: the image is refused as too costly.
- A refusal of the image itself (corrupt, past a limit, too slow, too big for the worker's memory)
  is remembered by the bytes' SHA-256, so the same file sent again costs a hash, not a decode.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass, field

import structlog

from shared import offload
from shared.image_limits import ImageLimits
from shared.images import ImageRefused, PreparedImage
from shared.settings.images import ImageSettings

log = structlog.get_logger()
REMEMBERED = 4096  # refused digests kept per process


@dataclass
class Decoder:
    limits: ImageLimits
    workers: int = 2
    per_user: int = 2
    timeout_s: float = 10.0
    memory_bytes: int = 1024 * 1024 * 1024
    user_wait_s: float = 2.0
    queue_wait_s: float = 5.0
    _refused: OrderedDict[str, ImageRefused] = field(default_factory=OrderedDict, init=False)
    _users: dict[str, tuple[asyncio.Semaphore, list[int]]] = field(default_factory=dict, init=False)

    @property
    def pool(self) -> offload.Pool:
        return offload.pool("image-decoding", self.workers, self.memory_bytes, self.queue_wait_s,
                            warm="shared.images:warm")

    async def prepare(self, data: bytes, user: str) -> PreparedImage:
        """`shared.images.prepare` of `data`, bounded. Raises ImageRefused (its status: 413, 422, 429,
        503)."""
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        known = self._refused.get(digest)
        if known is not None:
            log.info("image_refused_again", sha256=digest, status=known.status)
            raise ImageRefused(str(known), known.status)
        async with self._user_slot(user):
            try:
                prepared: PreparedImage = await self.pool.run("shared.images:prepare", data, self.limits,
                                                              timeout_s=self.timeout_s)
                return prepared
            except ImageRefused as exc:
                self._remember(digest, exc)
                raise
            except offload.TimedOut:
                self._remember(digest, refused := ImageRefused(
                    f"decoding the image took over {self.timeout_s:g} s; it is refused", 422))
                raise refused from None
            except offload.WorkerDied:
                self._remember(digest, refused := ImageRefused(
                    "decoding the image needed more memory than a decode may take; it is refused", 413))
                raise refused from None
            except offload.Busy:
                raise ImageRefused("every image decoder is busy; try again in a few seconds", 503) from None

    def _remember(self, digest: str, exc: ImageRefused) -> None:
        self._refused[digest] = exc
        while len(self._refused) > REMEMBERED:
            self._refused.popitem(last=False)

    def _user_slot(self, user: str) -> _UserSlot:
        if user not in self._users:
            self._users[user] = (asyncio.Semaphore(self.per_user), [0])
        return _UserSlot(self, user)


class _UserSlot:
    """One of the user's decodes in flight; the user's entry goes once none is (no growth per user)."""

    def __init__(self, decoder: Decoder, user: str) -> None:
        self.decoder, self.user = decoder, user

    async def __aenter__(self) -> None:
        sem, holders = self.decoder._users[self.user]
        holders[0] += 1
        try:
            await asyncio.wait_for(sem.acquire(), self.decoder.user_wait_s)
        except TimeoutError:
            self._leave(holders)
            raise ImageRefused(f"{self.decoder.per_user} of your images are being decoded already; try again "
                               "in a few seconds", 429) from None

    async def __aexit__(self, *exc: object) -> None:
        sem, holders = self.decoder._users[self.user]
        sem.release()
        self._leave(holders)

    def _leave(self, holders: list[int]) -> None:
        holders[0] -= 1
        if holders[0] == 0:
            self.decoder._users.pop(self.user, None)


_DECODERS: dict[tuple[int, ImageLimits, int, int, float, int], Decoder] = {}


def decoder(settings: ImageSettings) -> Decoder:
    """The process's decoder for these settings (a forked process gets its own)."""
    limits = settings.image_limits()
    key = (os.getpid(), limits, settings.image_decode_workers, settings.image_decodes_per_user,
           settings.image_decode_timeout_s, settings.image_decode_memory_bytes)
    if key not in _DECODERS:
        _DECODERS[key] = Decoder(limits, workers=key[2], per_user=key[3], timeout_s=key[4], memory_bytes=key[5])
    return _DECODERS[key]
