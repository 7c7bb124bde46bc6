"""Image decoding as the proxy (attachments) and the runtime (`read`, `show_file look`) do it, bounded
(docs/architecture.md "Images", "Bounded work").

- Off the event loop, in worker processes (shared/pools/offload.py) of bounded address space: a decode
  cannot stall the sessions the process serves, and cannot take the process's memory with it.
- At most `workers` decodes in flight per process; a decode that waits past `queue_wait_s` for one is
  refused as busy (503: try again). At most `per_user` in flight per user; past a short wait, 429.
- Past `timeout_s` a decode's worker is killed: the image is refused as too costly.
- A refusal of the image itself (corrupt, past a limit, too slow, too big for the worker's memory)
  is remembered by the bytes' SHA-256, so the same file sent again costs a hash, not a decode; so is
  the prepared image (up to `KEPT_BYTES` of them, most recently used kept), and the same bytes asked
  for while their decode runs wait for that one: five `read`s of one file in a step decode it once.
  `prepare` is a pure function of the bytes and the limits (one `Decoder` per limits), so what the
  model receives is the same either way.
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
KEPT_BYTES = 32 * 1024 * 1024  # prepared images kept per process (each within the stored-bytes limit)


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
    _prepared: OrderedDict[str, PreparedImage] = field(default_factory=OrderedDict, init=False)
    _kept: int = field(default=0, init=False)
    _running: dict[str, asyncio.Task[PreparedImage]] = field(default_factory=dict, init=False)
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
        prepared = self._prepared.get(digest)
        if prepared is not None:
            self._prepared.move_to_end(digest)
            return prepared
        running = self._running.get(digest)
        if running is None:
            # A task, not the caller's own await: the callers of the same bytes share it, and one
            # that is cancelled (its run aborted) leaves it to the others.
            running = self._running[digest] = asyncio.ensure_future(self._decode(data, digest, user))
            running.add_done_callback(lambda done: self._ran(digest, done))
        return await asyncio.shield(running)

    def _ran(self, digest: str, done: asyncio.Task[PreparedImage]) -> None:
        self._running.pop(digest, None)
        if done.cancelled() or done.exception() is not None:  # retrieved: every waiter may be gone
            return
        prepared = done.result()
        self._prepared[digest] = prepared
        self._kept += len(prepared.data)
        while self._kept > KEPT_BYTES and self._prepared:
            self._kept -= len(self._prepared.popitem(last=False)[1].data)

    async def _decode(self, data: bytes, digest: str, user: str) -> PreparedImage:
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
