"""Changing a SessionUIState document under the one rule (`shared.ui.uirules`), off the event loop.

Every change, a client's Yjs update or the agent's edit, is made on a copy of the document built
from its full update; the copy is measured and validated, and only a valid copy is handed back for
the caller to swap in. A refused change leaves the original untouched: nothing to roll back.

The work runs on one dedicated thread. Measured: pycrdt holds the GIL inside each call, so the
event loop runs between calls, not during one; the caps keep each call short (see the README's UI
document figures). The thread's stack is sized for the document cap because yrs' JSON export
recurses once per nesting level (~840 B of stack per level, and a level costs as little as ~5
encoded bytes): a 30,000-deep update segfaulted the main thread's 8 MiB stack.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from pycrdt import Doc

from shared.ui.form_rules import check_client_form
from shared.ui.uidoc import copy_doc, snapshot_of
from shared.ui.uirules import UiLimits, UiRefused, check_document_size, check_update_size, validate_snapshot

R = TypeVar("R")
STACK_PER_DOCUMENT_BYTE = 256
MIN_STACK = 32 * 1024 * 1024

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


@dataclass
class Merged:
    doc: Doc
    full: bytes  # the whole document as one V1 update
    snapshot: dict[str, Any]  # validated; keys sorted
    update: bytes  # what changed since the base (empty: nothing did)


def _worker(limits: UiLimits) -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            previous = threading.stack_size(max(MIN_STACK, STACK_PER_DOCUMENT_BYTE * limits.max_document_bytes))
            try:
                executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="uidoc")
                executor.submit(int).result()  # the one thread starts now, with that stack
            finally:
                threading.stack_size(previous)
            _executor = executor
        return _executor


async def _off_loop(limits: UiLimits, fn: Callable[..., R], *args: Any) -> R:
    return await asyncio.get_running_loop().run_in_executor(_worker(limits), functools.partial(fn, *args))


def apply_client_update(doc: Doc, update: bytes) -> None:
    """A client's V1 update: undecodable or unintegrable bytes are a 400."""
    if not update:
        raise UiRefused(400, "update is empty; an empty Yjs update is the two bytes 0x00 0x00")
    try:
        doc.apply_update(update)
    except (ValueError, RuntimeError) as exc:
        raise UiRefused(400, f"update is not a valid Yjs V1 update: {exc}") from exc
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
            raise
        raise UiRefused(400, f"update could not be decoded: {type(exc).__name__}") from exc


def _change(base: bytes, client_id: int, limits: UiLimits, previous: dict[str, Any] | None,
            change: Callable[[Doc], R], by_client: bool = False) -> tuple[Merged, R]:
    doc = copy_doc(base, client_id)
    before = doc.get_state()
    if by_client and previous is None:
        previous = snapshot_of(doc)
    result = change(doc)
    full = doc.get_update()
    check_document_size(len(full), limits)  # first: it also bounds the depth snapshot_of recurses through
    snapshot = snapshot_of(doc)
    validate_snapshot(snapshot, limits)
    if by_client:
        check_client_form(previous, snapshot)  # a client answers the agent's form, never mints one
    changed = doc.get_state() != before or snapshot != previous
    return Merged(doc=doc, full=full, snapshot=snapshot, update=doc.get_update(before) if changed else b""), result


async def merge_update(base: bytes, client_id: int, update: bytes, limits: UiLimits,
                       previous: dict[str, Any] | None = None) -> Merged:
    """`base` (a full update) with a client's `update` merged in, validated, its form changes within
    what a client may do (shared/ui/form_rules.py). Raises UiRefused."""
    check_update_size(update, limits)
    merged, _ = await _off_loop(limits, _change, base, client_id, limits, previous,
                                functools.partial(apply_client_update, update=update), True)
    return merged


async def apply_change(base: bytes, client_id: int, change: Callable[[Doc], R], limits: UiLimits,
                       previous: dict[str, Any] | None = None) -> tuple[Merged, R]:
    """`base` changed by `change(doc)` (the agent's edits), validated. Raises UiRefused."""
    return await _off_loop(limits, _change, base, client_id, limits, previous, change)


def _decodes(update: bytes) -> None:
    apply_client_update(Doc(), update)


async def check_update(update: bytes, limits: UiLimits) -> None:
    """Size and decode check without any stored state (the proxy, before forwarding live)."""
    check_update_size(update, limits)
    await _off_loop(limits, _decodes, update)
