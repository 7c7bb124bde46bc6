"""The summarizer sees the images it summarizes (services/compaction/summary_images.py): the most
recent ones as `detail: low` image parts with the stored bytes, numbered as the conversation's
`[Image]:` lines say, the rest named only; the request validates against the `openai` package's own
types for both APIs; a file that is gone is named, not sent."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Literal

import pytest
from PIL import Image

from scripted.transport import scripted_client, scripted_transport
from scripted.types import ScriptedReply
from services.compaction.summarizer import Summarizer
from services.compaction.summary_images import recent_images
from shared.contracts.records.messages import ImageRef, TextContent, ToolResultMessage, UserMessage
from shared.contracts.records.transcript import MessageEntry, SessionHeader, TranscriptEntry
from shared.history.summary_rules import SummarySpan
from shared.media.images import PreparedImage, data_url, image_file, store_image
from tests.contract.test_model_api import CHAT_PLAIN, RESPONSES_PLAIN, assert_exact

TS = "2026-01-01T00:00:00.000Z"


def png(width: int, colour: tuple[int, int, int]) -> PreparedImage:
    out = io.BytesIO()
    Image.new("RGB", (width, 40), colour).save(out, "PNG")
    return PreparedImage(out.getvalue(), "image/png", width, 40)


def entries_with_images(root: Path, count: int) -> tuple[list[TranscriptEntry], list[ImageRef]]:
    refs = [store_image(root, png(50 + i, (i * 40, 90, 200)), f"shot{i}.png") for i in range(count)]
    out: list[TranscriptEntry] = [SessionHeader(id="h", timestamp=TS)]
    for i, ref in enumerate(refs):
        message: UserMessage | ToolResultMessage
        if i % 2:
            message = ToolResultMessage(tool_call_id=f"c{i}", tool_name="read",
                                        content=[TextContent(text=f"Image shot{i}.png")], images=[ref])
        else:
            message = UserMessage(content=f"look {i}", images=[ref])
        out.append(MessageEntry(id=f"e{i}", parent_id=out[-1].id, timestamp=TS, message=message))
    return out, refs


def image_urls(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    return [p["image_url"] if p["type"] == "input_image" else p["image_url"]["url"]
            for p in content if p["type"] in ("input_image", "image_url")]


def user_content(api: str, body: dict[str, Any]) -> Any:
    messages = body["input"] if api == "responses" else body["messages"]
    (user,) = [m for m in messages if m["role"] == "user"]
    return user["content"]


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_the_summary_request_carries_the_recent_images_and_validates(
        tmp_path: Path, api: Literal["responses", "chat"]) -> None:
    entries, refs = entries_with_images(tmp_path, 5)
    client = scripted_client(lambda body: ScriptedReply(content="## Goal\nx"))
    summarizer = Summarizer(client, "gpt-5-mini", api, max_images=3)
    span = SummarySpan(history=entries[1:], turn_prefix=[], previous=None)
    await summarizer.summarize(span, previous_summary=None, custom_instructions=None, reserve_tokens=4000,
                               session_root=tmp_path)
    transport = scripted_transport(client)
    assert transport is not None
    ((_, body),) = transport.requests
    assert_exact(RESPONSES_PLAIN if api == "responses" else CHAT_PLAIN, body)
    content = user_content(api, body)
    expected = [data_url("image/png", image_file(tmp_path, r.sha256).read_bytes()) for r in refs[2:]]
    assert image_urls(content) == expected  # the last three, in order, the stored bytes
    images = [p for p in content if p["type"] in ("input_image", "image_url")]
    assert {p["detail"] if api == "responses" else p["image_url"]["detail"] for p in images} == {"low"}
    prompt = content[-1]["text"]
    assert '[Image]: "shot0.png" (image/png, 50x40)\n' in prompt + "\n"  # named only
    assert '[Image]: "shot4.png" (image/png, 54x40, attached as image #3)' in prompt
    labels = [p["text"] for p in content if p["type"] in ("text", "input_text")]
    assert 'Image #1: "shot2.png"' in labels and "never instructions" in labels[0]


async def test_without_images_the_request_is_plain_text_and_a_missing_file_is_named(tmp_path: Path) -> None:
    entries, refs = entries_with_images(tmp_path, 2)
    image_file(tmp_path, refs[1].sha256).unlink()
    client = scripted_client(lambda body: ScriptedReply(content="## Goal\nx"))
    summarizer = Summarizer(client, "gpt-5-mini", "chat")
    span = SummarySpan(history=entries[1:], turn_prefix=[], previous=None)
    await summarizer.summarize(span, previous_summary=None, custom_instructions=None, reserve_tokens=4000,
                               session_root=tmp_path)
    await summarizer.summarize(span, previous_summary=None, custom_instructions=None, reserve_tokens=4000)
    transport = scripted_transport(client)
    assert transport is not None
    (_, with_root), (_, without) = transport.requests
    content = user_content("chat", with_root)
    assert len(image_urls(content)) == 1 and "shot1.png" in content[-1]["text"]
    assert isinstance(user_content("chat", without), str)  # no session root: names only, as text


def test_recent_images_are_distinct_and_ordered_by_their_latest_mention(tmp_path: Path) -> None:
    entries, refs = entries_with_images(tmp_path, 3)
    again = MessageEntry(id="again", parent_id="e2", timestamp=TS, message=UserMessage(content="again", images=[refs[0]]))
    assert [r.sha256 for r in recent_images([*entries, again], 2)] == [refs[2].sha256, refs[0].sha256]
    assert recent_images(entries, 0) == []
