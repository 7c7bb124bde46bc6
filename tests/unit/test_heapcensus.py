"""The heap census (shared/serving/heapcensus.py, `GAMMA_HEAP_CENSUS`): off by default, and what a line holds."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from pathlib import Path

from shared.serving.heapcensus import census, census_loop
from shared.settings import load_settings


class _Held:
    def __init__(self) -> None:
        self.table = {f"sid-{i}": i for i in range(5000)}  # untracked by the collector: str -> int


class _LazyProxy:
    """Answers `__class__` by loading what it stands for, as openai's lazy module proxies do."""

    asked = 0

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        _LazyProxy.asked += 1
        return object


def test_off_by_default() -> None:
    assert load_settings().server.heap_census == ""
    asyncio.run(asyncio.wait_for(census_loop("", 0.01), 1))  # returns at once


def test_a_line_names_the_large_tables_and_their_holder(tmp_path: Path) -> None:
    held, lazy = _Held(), [_LazyProxy()]  # the list: a tracked container the walk looks into
    line = census()  # what came after startup's frozen heap (shared/serving/service.py settle_heap)
    assert line["rss"] > 0 and line["blocks"] > 0 and line["gc_objects"] > 0
    table = next(t for t in line["tables"] if t["len"] == 5000)
    assert table["holder"].endswith("_Held.table") and "sid-0" in table["sample"]
    assert _LazyProxy.asked == 0, "the census asked a proxy its __class__ (an import, in openai's)"
    del held, lazy

    async def lines() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(census_loop(str(tmp_path / "census-{pid}.jsonl"), 0.05), 1.0)

    asyncio.run(lines())
    (path,) = tmp_path.glob("census-*.jsonl")
    assert "types" in json.loads(path.read_text().splitlines()[0])


def test_the_census_leaves_the_sessions_state_within_the_full_passes_reach() -> None:
    before = gc.get_freeze_count()
    census()
    assert gc.get_freeze_count() == before  # nothing frozen by it (shared/serving/gcpolicy.py)
