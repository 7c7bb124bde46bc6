"""`make bench-images`: a session with 20 images over 40 turns against the same session without images
(docs/architecture.md "Images"): transcript bytes, wake time and request build time.

Each turn is a user message, an assistant `read` call, its result and an answer, appended by the
runtime's own `Transcript` (fsync'd JSON Lines). In the image session every other turn's `read`
returns a distinct 800x600 noise JPEG (a photograph's worst case, ~250 KB) stored by `shared/media/images.py`. Measured, median over `--repeat`:
- transcript bytes (and the growth per image against the text-only session);
- wake: `Transcript.load` + the replayed context + the first request body (cold image cache);
- request build: the next request body and its prefix-metric pieces in a live session (warm image
  cache), Responses and Chat.
Writes bench/results/images.json and prints a table. Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image

from services.runtime.engine.types import AgentContext
from services.runtime.model.chat_api import ChatApi
from services.runtime.model.model_api import ModelSettings
from services.runtime.model.responses_api import ResponsesApi
from services.runtime.store.transcript import Transcript
from shared.contracts.records.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.media.image_limits import ImageLimits
from shared.media.images import ImageSource, prepare, store_image

TURNS, IMAGES = 40, 20
RESULTS = Path(__file__).parent / "results" / "images.json"


async def _nothing() -> None:
    return None


def photo(i: int) -> bytes:
    im = Image.effect_noise((800, 600), 40 + i).convert("RGB")  # photo-like, distinct per image
    out = io.BytesIO()
    im.save(out, "JPEG", quality=85)
    return out.getvalue()


async def write_session(root: Path, images: bool) -> Path:
    transcript = Transcript(root / "transcript.jsonl", _nothing)
    await transcript.ensure_header()
    for turn in range(TURNS):
        call = ToolCall(id=f"c{turn}", name="read", arguments={"path": f"renders/card{turn}.png"})
        refs = None
        if images and turn % (TURNS // IMAGES) == 0:
            refs = [store_image(root, prepare(photo(turn), ImageLimits()), f"renders/card{turn}.png")]
        for message in (UserMessage(content=f"Turn {turn}: check card {turn} and tighten its title."),
                        AssistantMessage(content=[call], stop_reason="toolUse"),
                        ToolResultMessage(tool_call_id=call.id, tool_name="read", images=refs,
                                          content=[TextContent(text=f"Image renders/card{turn}.png: PNG, 800x600.")]),
                        AssistantMessage(content=[TextContent(text=f"Card {turn} looks right; title tightened.")])):
            await transcript.append_message(message)
    return root / "transcript.jsonl"


def body(api: Any, messages: list[Any], source: ImageSource) -> dict[str, Any]:
    """The request body and its pieces (the prefix metric's input, image data replaced by digests):
    what the runtime builds before each model call."""
    settings = ModelSettings(model="gpt-5-mini", api=api.name, images=source)
    out: dict[str, Any] = api.body(AgentContext("You are Gamma.", messages, []), settings)
    api.pieces(out)
    return out


def median_ms(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 3)


def measure(root: Path, repeat: int) -> dict[str, Any]:
    path = root / "transcript.jsonl"

    def wake() -> None:
        transcript = Transcript.load(path, _nothing)
        body(ResponsesApi(), transcript.context(), ImageSource(root))

    messages = Transcript.load(path, _nothing).context()
    warm = ImageSource(root)
    body(ResponsesApi(), messages, warm)
    return {"transcript_bytes": path.stat().st_size, "wake_ms": median_ms(wake, repeat),
            "build_responses_ms": median_ms(lambda: body(ResponsesApi(), messages, warm), repeat),
            "build_chat_ms": median_ms(lambda: body(ChatApi(), messages, warm), repeat)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, images in (("text_only", False), ("with_images", True)):
            root = Path(tmp) / name
            root.mkdir()
            asyncio.run(write_session(root, images))
            out[name] = measure(root, args.repeat)
    text, img = out["text_only"], out["with_images"]
    out["transcript_bytes_per_image"] = round((img["transcript_bytes"] - text["transcript_bytes"]) / IMAGES, 1)
    out["build_ratio_responses"] = round(img["build_responses_ms"] / text["build_responses_ms"], 2)
    out["build_ratio_chat"] = round(img["build_chat_ms"] / text["build_chat_ms"], 2)
    out["wake_ratio"] = round(img["wake_ms"] / text["wake_ms"], 2)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
