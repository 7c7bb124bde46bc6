"""An object census of a service's heap, for finding what a long run retains (docs/operations.md "Network faults to Redis, and the soak").

Off by default. With `GAMMA_HEAP_CENSUS=path` every `GAMMA_HEAP_CENSUS_S` seconds a line is appended
to the JSONL file at `path` (`{pid}` in it is replaced by the process id): the RSS, pymalloc's
allocated blocks and arenas, the cyclic GC's objects counted by type, and the largest containers
(dicts, sets, lists, deques, also those the collector does not track) with who holds them, so that two
lines far apart in a soak show which types and which tables grow with the sessions created. It
stops the event loop for the walk (a second or more on a large heap): a diagnostic, not for prod.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import heapq
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_CONTAINERS = (dict, set, frozenset, list, collections.deque)
_LARGE = 64  # items: smaller containers are not what a per-session table grows into


def _arenas() -> dict[str, int]:
    """pymalloc's arena counts from `sys._debugmallocstats` (it writes to the C stderr only)."""
    out: dict[str, int] = {}
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    for name in ("arenas allocated total", "arenas reclaimed", "arenas highwater mark", "arenas allocated current"):
        found = re.search(re.escape(name) + r"\s*=\s*([\d,]+)", text)
        if found:
            out[name.replace(" ", "_")] = int(found.group(1).replace(",", ""))
    return out


def _holder(obj: object, skip: object) -> str:
    """Who refers to a container: the first referrer's type and, for an instance dict or a module,
    its owner's name and the attribute."""
    for ref in gc.get_referrers(obj):
        if ref is skip or type(ref).__name__ in ("frame", "cell"):
            continue  # the census' own list and locals
        if isinstance(ref, dict):
            attr = next((str(k) for k, v in ref.items() if v is obj), "?")
            for owner in gc.get_referrers(ref):
                if getattr(owner, "__dict__", None) is ref:
                    where = getattr(owner, "__name__", "?") if type(owner).__name__ == "module" else (
                        f"{type(owner).__module__}.{type(owner).__qualname__}")
                    return f"{where}.{attr}"
        attrs = getattr(ref, "__dict__", None)  # an instance whose attributes live inline (3.11)
        attr = next((str(k) for k, v in attrs.items() if v is obj), "") if isinstance(attrs, dict) else ""
        return f"{type(ref).__module__}.{type(ref).__qualname__}" + (f".{attr}" if attr else "")
    return "?"


def census(top: int = 25) -> dict[str, Any]:
    # What startup allocated is frozen (shared/serving/service.py `settle_heap`), outside gc.get_objects()
    # and get_referrers(): the census counts what came after it, what can grow. Unfreezing it here
    # would freeze the sessions' state with it afterwards, out of every full pass's reach
    # (shared/serving/gcpolicy.py). No collection here either: pending cyclic garbage is counted.
    return _census(gc.get_objects(), top)


def _census(objs: list[Any], top: int) -> dict[str, Any]:
    by_type = collections.Counter(type(o).__qualname__ for o in objs)
    # Containers the collector does not track (a dict of strings) are reached one step from one it does.
    # Only the large ones are kept: a table of every container was a high-water mark of its own (RSS
    # steps of ~10 MB at a census, in one-off soaks with a census).
    # type(), not isinstance(): isinstance reads an object's __class__, which a lazy module proxy
    # (openai's) answers by importing what it stands for: the census would load modules into the heap
    # it measures (and took tens of seconds doing it).
    seen: dict[int, Any] = {}
    for o in objs:
        if issubclass(type(o), _CONTAINERS) and len(o) >= _LARGE:
            seen[id(o)] = o
        for r in gc.get_referents(o):
            if issubclass(type(r), _CONTAINERS) and len(r) >= _LARGE and not gc.is_tracked(r):
                seen[id(r)] = r
    largest = heapq.nlargest(top, seen.values(), key=len)
    # functools' caches keep their dict out of reach of a walk: their sizes by function
    caches = {f"{getattr(o, '__module__', '?')}.{getattr(o, '__qualname__', '?')}": o.cache_info().currsize
              for o in objs if type(o).__name__ == "_lru_cache_wrapper" and o.cache_info().currsize >= 32}
    del objs, seen
    tables = []
    for c in largest:
        sample = next(iter(c), None)
        tables.append({"id": id(c), "type": type(c).__qualname__, "len": len(c), "holder": _holder(c, largest),
                       "sample": repr(sample)[:80]})
    del largest
    rss = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {"t": round(time.time(), 1), "rss": rss, "blocks": sys.getallocatedblocks(), **_arenas(),
            "gc_objects": sum(by_type.values()), "types": dict(by_type.most_common(80)), "tables": tables,
            "lru_caches": caches}


async def census_loop(path: str, every_s: float) -> None:
    """Runs for the service's life (ServiceContext.spawn); an empty `path`: off."""
    if not path:
        return
    out = Path(path.replace("{pid}", str(os.getpid())))
    while True:
        await asyncio.sleep(every_s)
        line = json.dumps(census())
        await asyncio.to_thread(_append, out, line)


def _append(out: Path, line: str) -> None:
    with out.open("a") as f:
        f.write(line + "\n")
