"""Image tokens by OpenAI's published formulas (shared/image_tokens.py), checked against the worked
examples of OpenAI's vision guide, and counted in the context budget (shared/tokens.py)."""

from __future__ import annotations

import pytest

from shared.contracts.messages import ImageRef, TextContent, ToolResultMessage, UserMessage
from shared.image_tokens import image_tokens
from shared.tokens import estimate_tokens


@pytest.mark.parametrize(("size", "detail", "model", "tokens"), [
    ((1024, 1024), "high", "gpt-4o", 85 + 170 * 4),  # 768 x 768: 4 tiles
    ((2048, 4096), "high", "gpt-4o", 85 + 170 * 6),  # 1024 x 2048, then 768 x 1536: 6 tiles
    ((4096, 8192), "low", "gpt-4o", 85),  # low detail: the base only
    ((1024, 1024), "auto", "gpt-4.1-mini", 1659),  # 1024 patches x 1.62
    ((1800, 2400), "high", "gpt-4.1-mini", 2353),  # 1452 patches (capped and refitted) x 1.62
    ((512, 512), "high", "gpt-4o-mini", 2833 + 5667),  # one tile
])
def test_the_formula_matches_the_guide(size: tuple[int, int], detail: str, model: str, tokens: int) -> None:
    assert image_tokens(size[0], size[1], detail, model) == tokens  # type: ignore[arg-type]


def ref(width: int, height: int) -> ImageRef:
    return ImageRef(sha256="a" * 64, mime_type="image/png", width=width, height=height, bytes=100, path="x.png")


def test_the_budget_counts_images_on_user_messages_and_tool_results() -> None:
    text = UserMessage(content="look at this")
    with_images = UserMessage(content="look at this", images=[ref(1024, 1024), ref(2048, 4096)])
    assert estimate_tokens(with_images, "gpt-4o") - estimate_tokens(text, "gpt-4o") == 765 + 1105
    tool = ToolResultMessage(tool_call_id="c", tool_name="read", content=[TextContent(text="Image x.png")])
    seen = tool.model_copy(update={"images": [ref(1024, 1024)]})
    assert estimate_tokens(seen, "gpt-5-mini") - estimate_tokens(tool, "gpt-5-mini") == 1659
