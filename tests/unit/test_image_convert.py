"""Images at the model boundary (services/runtime/model/convert.py): parts of the user message; a
tool's image inside the Responses function_call_output, or, for Chat Completions, in one user-role
message after the batch's tool messages; valid for the openai package's request types; the same
transcript converts to the same bytes."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from services.runtime.model.convert import Images, to_openai, to_responses_input
from shared.contracts.records.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.media.image_limits import ImageLimits
from shared.media.images import ImageSource, prepare, store_image
from tests.contract.test_model_api import CHAT, RESPONSES, assert_exact


def stored(root: Path, colour: tuple[int, int, int]) -> tuple[bytes, object]:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), colour).save(out, "PNG")
    image = prepare(out.getvalue(), ImageLimits())
    return image.data, store_image(root, image, "a.png")


def conversation(root: Path) -> list:
    _, photo = stored(root, (255, 0, 0))
    _, chart = stored(root, (0, 0, 255))
    calls = [ToolCall(id="c1", name="read", arguments={"path": "chart.png"}),
             ToolCall(id="c2", name="read", arguments={"path": "notes.md"})]
    return [UserMessage(content="see", images=[photo]),
            AssistantMessage(content=calls, stop_reason="toolUse"),
            ToolResultMessage(tool_call_id="c1", tool_name="read", content=[TextContent(text="Image chart.png")],
                              images=[chart]),
            ToolResultMessage(tool_call_id="c2", tool_name="read", content=[TextContent(text="notes")])]


def test_chat_puts_tool_images_after_the_batch(tmp_path: Path) -> None:
    images = Images(ImageSource(tmp_path), "low")
    messages = to_openai("sys", conversation(tmp_path), trusted_role="developer", images=images)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert messages[1]["content"][1]["image_url"]["detail"] == "low"
    assert messages[-1]["content"][1]["type"] == "image_url"
    assert_exact(CHAT, {"model": "m", "messages": messages, "stream": True})
    again = to_openai("sys", conversation(tmp_path), trusted_role="developer", images=Images(ImageSource(tmp_path), "low"))
    assert again == messages


def test_responses_puts_tool_images_in_the_output(tmp_path: Path) -> None:
    items = to_responses_input(conversation(tmp_path), "m", trusted_role="developer", images=Images(ImageSource(tmp_path)))
    outputs = [i["output"] for i in items if i["type"] == "function_call_output"]
    assert outputs[0][1]["type"] == "input_image" and outputs[1] == "notes"
    assert items[0]["content"][1]["type"] == "input_image"
    assert_exact(RESPONSES, {"model": "m", "input": items, "stream": True})


def test_a_missing_image_file_is_said_in_text(tmp_path: Path) -> None:
    messages = conversation(tmp_path)
    for f in (tmp_path / ".images").iterdir():
        f.unlink()
    items = to_responses_input(messages, "m", trusted_role="developer", images=Images(ImageSource(tmp_path)))
    assert items[0]["content"][1] == {"type": "input_text", "text": '[image "a.png" is no longer available]'}
