"""The viewable-files projection sends every change (services/runtime/ui/viewable.py): changes close
together go as one event, and a change made while an event is being published is sent after it, not
held until some later change."""

from __future__ import annotations

import asyncio
from typing import Any

from services.runtime.ui.viewable import ViewableFiles


def recorded() -> tuple[list[dict[str, Any]], set[asyncio.Task[None]], ViewableFiles]:
    """The events sent, the flush tasks, and the projection that sends them."""
    sent: list[dict[str, Any]] = []

    async def publish(data: dict[str, Any]) -> None:
        sent.append(data)

    background: set[asyncio.Task[None]] = set()
    return sent, background, ViewableFiles(publish, background, delay_s=0.01)


async def test_changes_close_together_are_one_event() -> None:
    sent, background, files = recorded()
    files.track("a.md")
    files.track("b.md", "c.md")
    await asyncio.gather(*background)
    assert [e["added"] for e in sent] == [["a.md", "b.md", "c.md"]]
    assert sent[0]["count"] == 3


async def test_a_change_made_while_an_event_is_published_is_sent_after_it() -> None:
    sent: list[dict[str, Any]] = []
    publishing, release = asyncio.Event(), asyncio.Event()

    async def slow_publish(data: dict[str, Any]) -> None:
        publishing.set()
        await release.wait()
        sent.append(data)

    background: set[asyncio.Task[None]] = set()
    files = ViewableFiles(slow_publish, background, delay_s=0.01)
    files.track("brief.xml")
    await publishing.wait()
    files.track("out/card_1.txt", "out/card_2.txt")  # the first event is still on its way
    release.set()
    await asyncio.wait_for(asyncio.gather(*background), 2)
    assert [e["added"] for e in sent] == [["brief.xml"], ["out/card_1.txt", "out/card_2.txt"]]
    assert not background


async def test_a_file_added_then_removed_before_the_event_is_not_announced() -> None:
    sent, background, files = recorded()
    files.replace(["kept.md"])
    files.track("tmp.md")
    files.track("tmp.md", deleted=True)
    files.track("kept.md", deleted=True)
    await asyncio.gather(*background)
    assert sent == [{"added": [], "removed": ["kept.md"], "count": 0, "truncated": False}]
