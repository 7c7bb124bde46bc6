"""The runtime's side of image collection (shared/media/image_gc.py): at each close of a session, holding
its lease, the images no transcript entry names any more leave its disk; counted and logged."""

from __future__ import annotations

import asyncio

import structlog
from prometheus_client import CollectorRegistry, Counter

from shared.media.image_gc import Collected, collect
from shared.storage.disk import SessionPaths

log = structlog.get_logger()


class ImageCollector:
    def __init__(self, grace_s: float, registry: CollectorRegistry | None = None) -> None:
        self.grace_s = grace_s
        self.removed: Counter | None = None
        self.removed_bytes: Counter | None = None
        if registry is not None:
            self.removed = Counter("gamma_images_collected", "Unreferenced conversation images removed", registry=registry)
            self.removed_bytes = Counter("gamma_images_collected_bytes", "Bytes of the images removed", registry=registry)

    async def at_close(self, sid: str, paths: SessionPaths) -> Collected:
        """Best effort: a failure leaves the images for the next close (logged, never raised)."""
        try:
            done = await asyncio.to_thread(collect, paths, self.grace_s)
        except OSError as exc:
            log.warning("images_collect_failed", session_id=sid, error=str(exc))
            return Collected()
        if done.removed:
            log.info("images_collected", session_id=sid, removed=done.removed, bytes=done.removed_bytes, kept=done.kept)
            if self.removed is not None and self.removed_bytes is not None:
                self.removed.inc(done.removed)
                self.removed_bytes.inc(done.removed_bytes)
        return done
