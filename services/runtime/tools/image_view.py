"""An image file as a tool result the model sees (docs/architecture.md "Images"): read within the
size bound, decoded and downscaled by Pillow, stored once by content hash; a corrupt or oversized
image is an error result. Every file access runs in the loop's default executor, the I/O pool
(shared/pools/iopool.py), as the other tools' reads do: a 20 MB read or a slow disk must not stall the
session's event loop. The decoding runs in a worker process, bounded per process and per user
(shared/pools/image_decoding.py): one tenant's images cannot stall or exhaust the worker others share."""

from __future__ import annotations

import asyncio

from services.runtime.engine.types import ToolOutcome
from services.runtime.tools.ports import WorkspaceHost
from shared.media.images import ImageRefused, read_workspace_image, sniff_workspace_file, store_image
from shared.pools.image_decoding import decoder
from shared.storage.disk import DiskError


async def is_image(host: WorkspaceHost, rel: str) -> bool:
    """Whether the file is a PNG, JPEG, GIF or WebP by its bytes (a missing file is not: the caller
    reports it as it does for text)."""
    try:
        return await asyncio.to_thread(sniff_workspace_file, host.paths.workspace, rel) is not None
    except DiskError:
        return False


async def image_outcome(host: WorkspaceHost, rel: str) -> ToolOutcome:
    limits = host.image_limits
    try:
        data = await asyncio.to_thread(read_workspace_image, host.paths.workspace, rel, limits.max_source_bytes)
        prepared = await decoder(host.image_settings).prepare(data, await host.tenant())
        ref = await asyncio.to_thread(store_image, host.paths.root, prepared, rel)
    except (DiskError, ImageRefused) as exc:
        return ToolOutcome(content=f"Cannot show the image {rel}: {exc}", is_error=True)
    kind = ref.mime_type.split("/")[1].upper()
    note = f"Image {rel}: {kind}, {ref.width}x{ref.height} pixels as you see it"
    if len(data) != ref.bytes or prepared.data != data:
        note += f" (downscaled or re-encoded from the {len(data)}-byte file)"
    return ToolOutcome(content=note + ".", images=[ref],
                       details={"path": rel, "image": ref.model_dump(mode="json", by_alias=True, exclude_none=True)})
