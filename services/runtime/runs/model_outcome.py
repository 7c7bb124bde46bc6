"""What a finished model reply means for the user (README "Models"; "what real models do").

- plain text with no tool call ends the run: real models often finish that way, and the interface
  never infers completion from the text. The harness delivers it as a blocking message_user (same
  event, `implicit: true`), and the assistant message is flagged in the transcript;
- a refusal is delivered the same way, marked `refusal: true`;
- a provider error (after the bounded retries) is an `error` event; the run has already ended;
- so is a reply the provider's content filter stopped (`reason: "content_filter"`), and an end the
  harness decided (a second empty reply, the run's budget: `source: "run"`, engine/reply_rules.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from shared.contracts.records.messages import AgentMessage, AssistantMessage, CustomMessage
from shared.contracts.streams.events import MessageUserData
from shared.redis import keys

if TYPE_CHECKING:
    from services.runtime.live.events import Outbox


CONTENT_FILTERED = ("The provider's content filter stopped the model's reply (finish_reason=content_filter); "
                    "what it wrote before is kept. Rephrase the request to continue.")
USAGE_FIELDS = ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens")


def count_usage(sid: str, data: dict[str, Any]) -> Callable[[Any], None]:
    """Redis commands adding one model_request to the session's totals (sent with the event)."""

    def add(pipe: Any) -> None:
        key = keys.model_usage(sid)
        pipe.hincrby(key, "requests", 1)
        for name in USAGE_FIELDS:
            if data.get(name):
                pipe.hincrby(key, name, int(data[name]))

    return add


def mark_implicit(message: AgentMessage) -> bool:
    """Flag a final plain-text (or refused) reply before it is recorded; True when flagged."""
    if not isinstance(message, AssistantMessage) or message.tool_calls() or message.stop_reason != "stop":
        return False
    if not (message.text().strip() or message.refusal):
        return False
    message.implicit_message_user = True
    return True


def continued_text(message: AssistantMessage, context: list[AgentMessage]) -> str:
    """The reply's text, with the part cut at the output token limit before it (the loop asked the
    model to continue it): the user reads the whole answer."""
    text = message.text()
    at = next((i for i in range(len(context) - 1, -1, -1) if context[i] is message), -1)
    if at >= 2:
        guidance, cut = context[at - 1], context[at - 2]
        if (isinstance(guidance, CustomMessage) and guidance.details.get("reason") == "max_output_tokens"
                and isinstance(cut, AssistantMessage) and cut.stop_reason == "length" and cut.text().strip()):
            return cut.text() + text
    return text


async def announce(outbox: Outbox, message: AgentMessage, context: list[AgentMessage]) -> None:
    if not isinstance(message, AssistantMessage):
        return
    if message.stop_reason == "error" and message.error_kind is not None:  # the harness ended the run
        await outbox.event("error", {"error": message.error_message or "the run stopped", "source": "run",
                                     "reason": message.error_kind, "model": message.model})
    elif message.stop_reason == "error":
        await outbox.event("error", {"error": f"model request failed: {message.error_message}", "source": "model",
                                     "model": message.model})
    elif message.stop_reason == "contentFilter":
        await outbox.event("error", {"error": CONTENT_FILTERED, "source": "model", "reason": "content_filter",
                                     "model": message.model})
    elif message.implicit_message_user:
        refused = bool(message.refusal) and not message.text().strip()
        text = f"The model refused: {message.refusal}" if refused else continued_text(message, context)
        await outbox.event("message_user", MessageUserData(message=text, block_on_user=True, tool_call_id="",
                                                           implicit=True, refusal=refused).model_dump())
