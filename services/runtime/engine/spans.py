"""The runtime's spans, with OpenTelemetry's GenAI semantic conventions (the attribute names of the
installed `opentelemetry-semantic-conventions`): a run (`invoke_agent`), each model request
(`chat {model}`, with the usage the API reported) and each tool call (`execute_tool {name}`).

Never a span per streamed chunk: a model request's span covers its whole stream."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from shared.contracts.records.messages import AssistantMessage

_TRACER = trace.get_tracer("gamma.runtime")
AGENT_NAME = "gamma"
# The API the model client speaks (the official `openai` client, OpenAI or a compatible server).
PROVIDER = gen_ai.GenAiProviderNameValues.OPENAI.value


@contextmanager
def run_span(sid: str, run_id: str) -> Iterator[Span]:
    """One agent run, current while it lasts: its model requests and tool calls are its children."""
    with _TRACER.start_as_current_span(f"{gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value} {AGENT_NAME}",
                                       kind=SpanKind.INTERNAL, attributes={
            gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value,
            gen_ai.GEN_AI_PROVIDER_NAME: PROVIDER, gen_ai.GEN_AI_SYSTEM: PROVIDER,
            gen_ai.GEN_AI_AGENT_NAME: AGENT_NAME, gen_ai.GEN_AI_CONVERSATION_ID: sid,
            "gamma.session_id": sid, "gamma.run_id": run_id}) as span:
        yield span


@contextmanager
def model_span(model: str, api: str) -> Iterator[Span]:
    """One model request (all its retries), a client span."""
    chat = gen_ai.GenAiOperationNameValues.CHAT.value
    with _TRACER.start_as_current_span(f"{chat} {model}", kind=SpanKind.CLIENT, attributes={
            gen_ai.GEN_AI_OPERATION_NAME: chat, gen_ai.GEN_AI_PROVIDER_NAME: PROVIDER,
            gen_ai.GEN_AI_SYSTEM: PROVIDER, gen_ai.GEN_AI_REQUEST_MODEL: model,
            gen_ai.GEN_AI_REQUEST_STREAM: True, "gamma.model.api": api}) as span:
        yield span


def record_reply(span: Span, message: AssistantMessage, attempts: int) -> None:
    """The usage and outcome of a model request on its span (a recorded one only: nothing to build
    when tracing is off)."""
    if not span.is_recording():
        return
    usage = message.usage
    span.set_attributes({
        gen_ai.GEN_AI_RESPONSE_MODEL: message.model or "",
        gen_ai.GEN_AI_RESPONSE_FINISH_REASONS: [message.stop_reason],
        gen_ai.GEN_AI_USAGE_INPUT_TOKENS: usage.input,
        gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output,
        gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read,
        gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: usage.reasoning,
        "gamma.model.attempts": attempts, "gamma.model.usage_estimated": usage.estimated})
    if message.stop_reason == "error":
        span.set_attribute(ERROR_TYPE, "model_error")
        span.set_status(Status(StatusCode.ERROR, (message.error_message or "")[:300]))


@contextmanager
def tool_span(name: str, call_id: str) -> Iterator[Span]:
    """One tool call, a child of the run (tools of a batch run in parallel)."""
    execute = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
    with _TRACER.start_as_current_span(f"{execute} {name}", kind=SpanKind.INTERNAL, attributes={
            gen_ai.GEN_AI_OPERATION_NAME: execute, gen_ai.GEN_AI_TOOL_NAME: name,
            gen_ai.GEN_AI_TOOL_CALL_ID: call_id, gen_ai.GEN_AI_TOOL_TYPE: "function"}) as span:
        yield span


def record_tool(span: Span, is_error: bool) -> None:
    if is_error and span.is_recording():
        span.set_attribute(ERROR_TYPE, "tool_error")
        span.set_status(Status(StatusCode.ERROR))
