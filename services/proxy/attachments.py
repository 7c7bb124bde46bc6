"""A message's attachments, checked before anything is sent (docs/architecture.md "Images").

Each path must name a regular file inside the session's workspace (opened beneath it, as every
workspace read is), the count and the bytes of one message are bounded, and an image must decode
(shared/media/images.py) within the decoding bounds (shared/pools/image_decoding.py: worker processes, a bound
per process and per user, a 429/503 past them). Images are stored once by content hash on the session disk and travel as
references; the other files are named (path, media type, size) for the agent to `read`. The first bad
path is a 4xx naming it; then nothing is stored in the inbox and no wake is sent.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from services.proxy.edge.errors import ApiError
from shared.contracts.records.messages import ImageRef
from shared.contracts.streams.inbox import AttachedFile
from shared.media.images import ImageRefused, PreparedImage, read_workspace_image, sniff, store_image
from shared.pools.image_decoding import decoder
from shared.settings import Settings
from shared.storage import workspace_fs
from shared.storage.disk import DiskError, session_paths


@dataclass(frozen=True)
class Attachments:
    images: list[ImageRef]
    files: list[AttachedFile]


def _stat(workspace: Path, rel: str) -> tuple[str, int, bytes]:
    """Normalised path, size and first bytes of a workspace file. Raises DiskError."""
    opened = workspace_fs.open_entry(workspace, rel)
    try:
        if not stat.S_ISREG(opened.st.st_mode):
            raise DiskError(f"{opened.rel!r} is a directory")
        os.set_blocking(opened.fd, True)
        return opened.rel, opened.st.st_size, os.pread(opened.fd, 12, 0)
    finally:
        os.close(opened.fd)


def _refused(rel: str, exc: Exception, status: int) -> ApiError:
    retry = {"Retry-After": "5"} if status in (429, 503) else None  # decoders busy: a moment later
    return ApiError(status, f"attachments: {rel!r}: {exc}", detail={"attachment": rel}, headers=retry)


async def check_attachments(settings: Settings, sid: str, paths: list[str], owner: str) -> Attachments:
    """The attachments as the prompt carries them, or an ApiError naming the first bad one."""
    if len(paths) > settings.images.attachments_max:
        raise ApiError(422, f"attachments: {len(paths)} files; at most {settings.images.attachments_max} per message")
    root = session_paths(settings.storage.data_dir, sid)
    limits = settings.images.image_limits()
    found: list[tuple[str, int, bytes]] = []
    for rel in paths:
        try:
            norm, size, head = await asyncio.to_thread(_stat, root.workspace, rel)
        except DiskError as exc:
            raise _refused(rel, exc, exc.status) from exc
        if norm in (f[0] for f in found):
            raise _refused(rel, ValueError("attached twice"), 422)
        if sniff(head) is not None and size > limits.max_source_bytes:
            raise _refused(rel, ValueError(f"image is {size} bytes; the limit is {limits.max_source_bytes}"), 413)
        found.append((norm, size, head))
        total = sum(size for _, size, _ in found)
        if total > settings.images.attachments_max_bytes:  # named: the file that takes the message past the bound
            limit = settings.images.attachments_max_bytes
            raise _refused(rel, ValueError(f"the attachments come to {total} bytes with it; the limit is {limit}"), 413)
    prepared: list[tuple[str, PreparedImage]] = []
    files: list[AttachedFile] = []
    for norm, size, head in found:
        if sniff(head) is None:
            media = mimetypes.guess_type(norm)[0] or "application/octet-stream"
            files.append(AttachedFile(path=norm, media_type=media, bytes=size))
            continue
        try:
            data = await asyncio.to_thread(read_workspace_image, root.workspace, norm, limits.max_source_bytes)
            prepared.append((norm, await decoder(settings.images).prepare(data, owner)))
        except (DiskError, ImageRefused) as exc:
            raise _refused(norm, exc, exc.status) from exc
    # Stored only once every attachment passed: a refused message leaves nothing behind.
    images = [await asyncio.to_thread(store_image, root.root, image, norm) for norm, image in prepared]
    return Attachments(images, files)
