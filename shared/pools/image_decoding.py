"""Image decoding as the proxy (attachments) and the runtime (`read`, `show_file look`) do it, bounded
(docs/architecture.md "Images", "Bounded work").

- Off the event loop, in worker processes (shared/pools/offload.py) of bounded address space: a decode
  cannot stall the sessions the process serves, and cannot take the process's memory with it.
- At most `workers` decodes in flight per process; a decode that waits past `queue_wait_s` for one is
  refused as busy (503: try again). At most `per_user` in flight per user; past a short wait, 429.
- Past `timeout_s` a decode's worker is killed: the image is refused as too costly.
- A refusal of the image itself (corrupt, past a limit, too slow, too big for the worker's memory)
  is remembered by the bytes' SHA-256, so the same file sent again costs a hash, not a decode.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import structlog

from shared.media.image_limits import ImageLimits
from shared.media.images import ImageRefused, PreparedImage
from shared.pools import offload
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
    _users: offload.PerKey | None = field(default=None, init=False)

    @property
    def pool(self) -> offload.Pool:
        return offload.pool("image-decoding", self.workers, self.memory_bytes, self.queue_wait_s,
                            warm="shared.media.images:warm")

    async def prepare(self, data: bytes, user: str) -> PreparedImage:
        """`shared.media.images.prepare` of `data`, bounded. Raises ImageRefused (its status: 413, 422, 429,
        503)."""
        digest = await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())
        known = self._refused.get(digest)
        if known is not None:
            log.info("image_refused_again", sha256=digest, status=known.status)
            raise ImageRefused(str(known), known.status)
        async with self._user_slot(user):
            try:
                prepared: PreparedImage = await self.pool.run("shared.media.images:prepare", data, self.limits,
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

    @contextlib.asynccontextmanager
    async def _user_slot(self, user: str) -> AsyncIterator[None]:
        if self._users is None:
            self._users = offload.PerKey(self.per_user, self.user_wait_s)
        try:
            async with self._users.slot(user):
                yield
        except offload.Busy:
            raise ImageRefused(f"{self.per_user} of your images are being decoded already; try again in a few "
                               "seconds", 429) from None


_DECODERS: dict[tuple[int, ImageLimits, int, int, float, int], Decoder] = {}


def decoder(settings: ImageSettings) -> Decoder:
    """The process's decoder for these settings (a forked process gets its own)."""
    limits = settings.image_limits()
    key = (os.getpid(), limits, settings.image_decode_workers, settings.image_decodes_per_user,
           settings.image_decode_timeout_s, settings.image_decode_memory_bytes)
    if key not in _DECODERS:
        _DECODERS[key] = Decoder(limits, workers=key[2], per_user=key[3], timeout_s=key[4], memory_bytes=key[5])
    return _DECODERS[key]
