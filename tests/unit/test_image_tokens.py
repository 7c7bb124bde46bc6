"""Image tokens by OpenAI's published formulas (shared/media/image_tokens.py), checked against the worked
examples of OpenAI's vision guide, counted in the context budget (shared/history/tokens.py) and in each
request's `model_request` prompt tokens (model/openai_stream.py)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any, Literal

import pytest
from PIL import Image

from scripted.transport import scripted_client
from scripted.types import ScriptedReply
from services.runtime.engine.types import AgentContext, AgentEvent
from services.runtime.model.chat_api import ChatApi
from services.runtime.model.openai_stream import ModelSettings, OpenAIStream, PieceTokens
from services.runtime.model.responses_api import ResponsesApi
from services.runtime.runs import compaction_trigger as trigger
from shared.contracts.records.messages import (
    AssistantMessage,
    ImageRef,
    TextContent,
    ToolResultMessage,
    UserMessage,
)
from shared.contracts.records.transcript import MessageEntry, SessionHeader, TranscriptEntry
from shared.history.tokens import TokenCounter, estimate_tokens
from shared.media.image_limits import ImageLimits
from shared.media.image_tokens import Detail, image_tokens
from shared.media.images import ImageSource, prepare, store_image


@pytest.mark.parametrize(("size", "detail", "model", "tokens"), [
    ((1024, 1024), "high", "gpt-4o", 85 + 170 * 4),  # 768 x 768: 4 tiles
    ((2048, 4096), "high", "gpt-4o", 85 + 170 * 6),  # 1024 x 2048, then 768 x 1536: 6 tiles
    ((4096, 8192), "low", "gpt-4o", 85),  # low detail: the base only
    ((1024, 1024), "auto", "gpt-4.1-mini", 1659),  # 1024 patches x 1.62
    ((1800, 2400), "high", "gpt-4.1-mini", 2353),  # 1452 patches (capped and refitted) x 1.62
    ((512, 512), "high", "gpt-4o-mini", 2833 + 5667),  # one tile
    ((1024, 1024), "high", "gpt-5", 70 + 140 * 4),  # GPT-5's own tile constants
    ((1024, 1024), "low", "gpt-5-chat-latest", 70),
    ((1024, 1024), "auto", "gpt-5-mini", 1659),  # patches, not GPT-5's tiles
    ((1024, 1024), "auto", "gpt-5.4-nano", 2520),  # 1024 patches x 2.46, rounded up
    ((1024, 1024), "high", "o1-pro", 75 + 150 * 4),
    ((1024, 1024), "high", "gpt-4.1", 85 + 170 * 4),
])
def test_the_formula_matches_the_guide(size: tuple[int, int], detail: Detail, model: str, tokens: int) -> None:
    assert image_tokens(size[0], size[1], detail, model) == tokens


def ref(width: int, height: int) -> ImageRef:
    return ImageRef(sha256="a" * 64, mime_type="image/png", width=width, height=height, bytes=100, path="x.png")


def test_the_budget_counts_images_on_user_messages_and_tool_results() -> None:
    text = UserMessage(content="look at this")
    with_images = UserMessage(content="look at this", images=[ref(1024, 1024), ref(2048, 4096)])
    assert estimate_tokens(with_images, "gpt-4o") - estimate_tokens(text, "gpt-4o") == 765 + 1105
    tool = ToolResultMessage(tool_call_id="c", tool_name="read", content=[TextContent(text="Image x.png")])
    seen = tool.model_copy(update={"images": [ref(1024, 1024)]})
    assert estimate_tokens(seen, "gpt-5-mini") - estimate_tokens(tool, "gpt-5-mini") == 1659


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_requests_prompt_tokens_include_its_images_by_the_formula(tmp_path: Path, api: Literal["responses", "chat"]) -> None:
    """The `model_request` event: the text tokens of the request as sent (each image a short stand-in)
    plus, exactly, the formula's tokens for each image it carries; an image whose file is gone is sent
    as text and not counted as an image."""
    shots = []
    for size in ((1024, 1024), (300, 200)):
        out = io.BytesIO()
        Image.new("RGB", size, (20, 90, 200)).save(out, "PNG")
        shots.append(store_image(tmp_path, prepare(out.getvalue(), ImageLimits()), "shot.png"))
    gone = ref(640, 480)  # never stored
    settings = ModelSettings(model="gpt-4o", api=api, images=ImageSource(tmp_path), image_detail="high")
    client = scripted_client(lambda body: ScriptedReply(content="seen"))
    counter = TokenCounter()
    stream = OpenAIStream(client, settings, counter)
    context = AgentContext("sys", [UserMessage(content="look", images=[shots[0], gone]),
                                   AssistantMessage(content=[TextContent(text="ok")]),
                                   UserMessage(content="and this", images=[shots[1]])], [])
    events: list[AgentEvent] = []

    async def emit(ev: AgentEvent) -> None:
        events.append(ev)

    await stream(context, emit, asyncio.Event())
    (request,) = [e.data for e in events if e.type == "model_request"]
    model_api = ResponsesApi() if api == "responses" else ChatApi()
    text_tokens = len(PieceTokens(counter).encode(model_api.pieces(model_api.body(context, settings))))
    formula = image_tokens(1024, 1024, "high", "gpt-4o") + image_tokens(300, 200, "high", "gpt-4o")
    assert formula == 765 + 255 and request["image_tokens"] == formula
    assert request["prompt_tokens"] == text_tokens + formula
    assert stream.last_prompt_tokens == request["prompt_tokens"]


def test_the_cut_counts_images_by_the_sessions_model_and_detail() -> None:
    """The cut point counts images as the threshold does (the model's scheme, the configured detail):
    a 2048 x 1024 image is 6 tiles, 1105 tokens for GPT-4o and 910 for GPT-5, 85 at `low`, and ~2.5k by
    GPT-5-mini's patches, so a 1,000-token recent budget is filled by it alone, or holds everything."""
    ts = "2026-01-01T00:00:00.000Z"
    entries: list[TranscriptEntry] = [SessionHeader(id="h", timestamp=ts)]
    for i, message in enumerate([UserMessage(content="first"), AssistantMessage(content=[TextContent(text="ok")]),
                                 UserMessage(content="second", images=[ref(2048, 1024)]),
                                 AssistantMessage(content=[TextContent(text="seen")])]):
        entries.append(MessageEntry(id=f"e{i}", parent_id=entries[-1].id, timestamp=ts, message=message))

    def kept(model: str, detail: Detail = "auto") -> str | None:
        return trigger.find_cut_point(entries, 1000, model, detail)

    assert kept("gpt-4o") == "e2" and kept("gpt-5-mini") == "e2"  # the image alone fills the budget
    assert kept("gpt-5") is None and kept("gpt-4o", "low") is None  # everything fits: nothing to cut
    requests = {model: trigger.make_request("s", entries, keep_recent_tokens=1000, model=model, detail="high")
                for model in ("gpt-4o", "gpt-5")}
    low = trigger.make_request("s", entries, keep_recent_tokens=1000, model="gpt-4o", detail="low")
    assert requests["gpt-4o"] is not None and requests["gpt-4o"].first_kept_entry_id == "e2"
    assert requests["gpt-5"] is None and low is None
    assert image_tokens(2048, 1024, "high", "gpt-4o") == 1105 and image_tokens(2048, 1024, "high", "gpt-5") == 910


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_the_shared_prefix_counts_the_images_it_holds(tmp_path: Path, api: Literal["responses", "chat"]) -> None:
    """A request that extends the previous one shares all of it, images included: its
    `shared_prefix_tokens` is the previous request's `prompt_tokens` (the text prefix alone holds only
    the images' stand-ins)."""
    out = io.BytesIO()
    Image.new("RGB", (1024, 768), (200, 90, 20)).save(out, "PNG")
    shot = store_image(tmp_path, prepare(out.getvalue(), ImageLimits()), "shot.png")
    settings = ModelSettings(model="gpt-4o", api=api, images=ImageSource(tmp_path), image_detail="high")
    stream = OpenAIStream(scripted_client(lambda body: ScriptedReply(content="seen")), settings, TokenCounter())
    messages: list[Any] = [UserMessage(content="look", images=[shot])]
    events: list[AgentEvent] = []

    async def emit(ev: AgentEvent) -> None:
        events.append(ev)

    for follow_up in ("and again", "once more"):
        messages.append(await stream(AgentContext("sys", list(messages), []), emit, asyncio.Event()))
        messages.append(UserMessage(content=follow_up))
    first, second = [e.data for e in events if e.type == "model_request"]
    assert first["image_tokens"] == second["image_tokens"] == 85 + 170 * 4
    assert second["shared_prefix_tokens"] == first["prompt_tokens"]
