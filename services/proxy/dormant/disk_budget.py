"""The per-user disk budget in the proxy (shared/costs/user_disk.py's measure and rule; docs/architecture.md
"Limits on hostile input"). The workspace quota bounds one session; without this, a user at the
session cap could hold the cap times it, and every fork multiplied it.

Checked where the proxy adds to a user's disk: a fork (the source's workspace is copied), an upload
or a dormant write (the body's size), a document write (the deck's size). Past the budget: 507 naming
it, and nothing is written. The runtime checks the agent's writes and each bash call the same way.
"""

from __future__ import annotations

import asyncio

from services.proxy.deps import Proxy
from services.proxy.edge.errors import ApiError
from shared.costs.user_disk import UserDisk, disk_of, measures
from shared.storage.disk import session_paths


def _disk(proxy: Proxy) -> UserDisk:
    return measures(proxy.settings.storage.data_dir)


async def user_disk(proxy: Proxy, user: str) -> int:
    return await _disk(proxy).used(proxy.redis, user)


async def admit(proxy: Proxy, user: str, adding: int, what: str) -> None:
    """ApiError 507 when `adding` more bytes would take `user` past the budget; else count them."""
    why = await _disk(proxy).admit(proxy.redis, user, adding, what, proxy.settings.storage.user_disk_bytes)
    if why is not None:
        raise ApiError(507, why)


async def workspace_disk(proxy: Proxy, sid: str) -> int:
    """What a copy of `sid`'s workspace takes (a fork lays one out)."""
    return await asyncio.to_thread(disk_of, [session_paths(proxy.settings.storage.data_dir, sid).workspace])
