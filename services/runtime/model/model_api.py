"""The model adapter's one interface; implementations: `ResponsesApi` and `ChatApi`, both over the
official `openai` client. An implementation builds the request body from the agent context and turns
the streamed reply into a complete AssistantMessage; retries and accounting are the caller's
(openai_stream.OpenAIStream)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson
from openai import AsyncOpenAI

from services.runtime.engine.types import AgentContext, AgentEvent, Emit
from services.runtime.model.sse import ReadGate
from shared.catalogue import Capabilities, catalogue
from shared.contracts.records.messages import AssistantMessage, ImageRef, TextContent, ToolCall
from shared.contracts.streams.events import ToolCallProgressData

ApiName = Literal["responses", "chat"]
TrustedRole = Literal["developer", "user"]
ImageDetail = Literal["auto", "low", "high"]


class ImageUrls(Protocol):
    """The data URL of a stored image (shared/media/images.py ImageSource), None when its file is gone."""

    def url(self, ref: ImageRef) -> str | None: ...


@dataclass
class ModelSettings:
    model: str
    reasoning_effort: str | None = None  # as the session asked (None: the model's default)
    api: ApiName = "chat"
    max_output_tokens: int | None = None  # the deployment's cap, lowered to the model's own (`output_cap`)
    cache_key: str | None = None  # prompt_cache_key: the session id
    # Chat Completions sends prompt_cache_key only to OpenAI: other servers may refuse unknown fields.
    chat_cache_key: bool = False
    # The role of the harness's own messages (model/convert.py; ModelServerSettings.trusted_role_for).
    trusted_role: TrustedRole = "developer"
    images: ImageUrls | None = None  # the session's stored images (model/convert.py)
    image_detail: ImageDetail = "auto"
    max_retries: int = 0  # 429, 5xx and dropped connections
    retry_base_s: float = 1.0
    retry_max_s: float = 60.0
    # What the model accepts (shared/catalogue): the request bodies are built from it. Unset: the
    # catalogue's entry for `model` without the deployment's extras (services/runtime/hosting/session.py
    # `model_settings` passes the configured one).
    caps: Capabilities = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.caps is None:
            self.caps = catalogue().resolve(self.model).caps

    @property
    def effective_effort(self) -> str | None:
        """The effort the model reasons at (the one asked for, else its default); None: no reasoning."""
        return self.caps.effective_effort(self.effort)  # type: ignore[arg-type]

    @property
    def effort(self) -> str | None:
        """The effort to send: only one the model accepts (reference §2.1: any other is a 400)."""
        e = self.reasoning_effort
        return e if e is not None and e in self.caps.efforts else None

    @property
    def reasons(self) -> bool:
        """The model reasons on this call (explicitly or at its default effort; reference §1.2)."""
        return self.effective_effort not in (None, "none")

    @property
    def output_cap(self) -> int | None:
        caps_max = self.caps.max_output
        if self.max_output_tokens is None:
            return None
        return min(self.max_output_tokens, caps_max) if caps_max is not None else self.max_output_tokens


class ModelApi(Protocol):
    @property
    def name(self) -> ApiName: ...

    def body(self, context: AgentContext, settings: ModelSettings) -> dict[str, Any]: ...

    def pieces(self, body: dict[str, Any]) -> list[str]:
        """The request in order, static part first, for the token-level shared-prefix metric."""
        ...

    async def consume(self, client: AsyncOpenAI, body: dict[str, Any], partial: AssistantMessage, emit: Emit,
                      signal: asyncio.Event, gate: ReadGate | None = None,
                      opened: Callable[[], None] | None = None) -> AssistantMessage:
        """Send and read the stream (each read after the first waits for `gate`, if any; `opened` is
        called once the response's headers are in). Transport and API errors are raised (the caller
        retries them)."""
        ...


StreamErrorKind = Literal["api", "invalid", "no_terminal"]


class StreamError(Exception):
    """A 200 stream that gave no usable reply: an error the API reported inside it (`error` /
    `response.failed` events, kind "api"), a reply that does not parse ("invalid"), or a body that
    ended without its terminal event ("no_terminal": retried like a cut stream, reference §3.3)."""

    def __init__(self, message: str, retryable: bool, kind: StreamErrorKind = "api") -> None:
        super().__init__(message)
        self.retryable = retryable
        self.kind = kind


def no_terminal(what: str) -> StreamError:
    """The body ended before the stream said it was complete: not an answer (reference §3.3; Codex's
    "stream closed before response.completed", retried)."""
    return StreamError(f"stream closed before {what}", retryable=True, kind="no_terminal")


def obj(value: Any) -> dict[str, Any]:
    """A reply's field read as an object: anything else (null, a wrong type) as an empty one."""
    return value if isinstance(value, dict) else {}


PROGRESS_STEP_BYTES = 1024


class ArgumentProgress:
    """How far each tool call's streamed arguments have come (a large `write` streams for a while):
    a `tool_call_progress` event per call after each PROGRESS_STEP_BYTES, at most one per read."""

    def __init__(self) -> None:
        self.calls: dict[str, list[Any]] = {}  # key -> [call id, name, bytes, bytes last told]
        self.moved: set[str] = set()

    def start(self, key: str, call_id: str, name: str) -> None:
        slot = self.calls.setdefault(key, ["", "", 0, 0])
        # What the model wrote, shown as a label only: bounded (the call itself keeps them whole).
        slot[0], slot[1] = call_id[:200] or slot[0], name[:200] or slot[1]

    def grow(self, key: str, delta: str) -> None:
        slot = self.calls.setdefault(key, ["", "", 0, 0])
        slot[2] += len(delta.encode())
        if slot[2] - slot[3] >= PROGRESS_STEP_BYTES:
            self.moved.add(key)

    async def tell(self, emit: Emit) -> None:
        """The calls that moved a step since they were last told: one event each."""
        for key in sorted(self.moved):
            slot = self.calls[key]
            slot[3] = slot[2]
            await emit(AgentEvent(type="tool_call_progress", data=ToolCallProgressData(
                tool_call_id=slot[0], tool_name=slot[1], bytes=slot[2]).model_dump()))
        self.moved.clear()


def stand_in(url: str) -> str:
    """The text an image's data URL is replaced with in the pieces (unique per image's bytes)."""
    return f"image:{hash(url) & 0xFFFFFFFFFFFF:x}"


def piece_json(item: Any) -> str:
    """A request piece as the prefix metric tokenizes it: compact JSON text, made by orjson (the
    stdlib's encoder took ~4% of the runtime's loop on a short turn: the head piece alone, every tool
    schema and the system prompt, is tens of KB at every model call); the stdlib for what orjson refuses."""
    try:
        return orjson.dumps(item).decode()
    except TypeError:
        return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


def without_image_data(item: Any) -> Any:
    """A request item with each image's data URL replaced by a short stand-in: the prefix metric
    tokenizes pieces as text, and megabytes of base64 are neither text nor what the model is billed
    (images are counted by shared/media/image_tokens.py). `hash` of a str is computed once per string
    object, and the URLs are the image source's cached strings: the stand-in costs nothing per request."""
    if isinstance(item, str):
        return stand_in(item) if item.startswith("data:image/") else item
    if isinstance(item, dict):
        return {k: without_image_data(v) for k, v in item.items()}
    if isinstance(item, list):
        return [without_image_data(v) for v in item]
    return item


def parse_arguments(raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        # Keep the raw text: the tool answers with a validation error the model can fix.
        return {"__invalid_json__": raw}
    return args if isinstance(args, dict) else {"__invalid_json__": raw}


def assemble(text: list[str], calls: dict[int, dict[str, Any]]) -> list[Any]:
    content: list[Any] = []
    if text:
        content.append(TextContent(text="".join(text)))
    for index in sorted(calls):
        slot = calls[index]
        content.append(ToolCall(id=slot["id"] or f"call_{index}", name=slot["name"],
                                arguments=parse_arguments(slot["arguments"])))
    return content


FinishReason = Literal["stop", "length", "content_filter"]


def finish(partial: AssistantMessage, reason: FinishReason = "stop") -> AssistantMessage:
    """The stop reason of a complete reply. The provider's content filter is its own outcome, never the
    output limit (reference §3.3); a reply cut at the output limit stays "length" even with tool
    calls: a call cut there has partial arguments and is not run (engine/loop.py)."""
    if reason == "content_filter":
        partial.stop_reason = "contentFilter"
    elif reason == "length":
        partial.stop_reason = "length"
    elif partial.tool_calls():
        partial.stop_reason = "toolUse"
    else:
        partial.stop_reason = "stop"
    return partial
