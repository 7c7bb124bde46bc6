"""The agent loop as one function (Pi's agent-loop.ts, with its later semantics):

- steering messages are taken after the whole tool batch of a turn and before the next model call;
- follow-ups only when the agent would otherwise stop;
- every tool call gets a result (errors are values), results in call order, tools run in parallel;
- `terminate` ends the run when every result of the batch sets it (a yield: `message_user` with
  blockOnUser): no further model call in that run, and steering or follow-ups queued meanwhile stay
  queued for the session's idle rules (docs/architecture.md "Delivery, yield and the idle rules");
  agent_end then says stopReason "yield";
- an assistant message with stop_reason error/aborted/contentFilter ends the run; replies cut at the
  output limit, empty replies and the run's budget follow engine/reply_rules.py.

State lives in `context.messages`; everything else goes out as events (persistence listens to
`message_end`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.runtime.engine.reply_rules import RunTally, cut_call_outcome, judge, over_budget
from services.runtime.engine.spans import record_tool, tool_span
from services.runtime.engine.types import (
    AgentContext,
    AgentEvent,
    Emit,
    LoopConfig,
    Tool,
    ToolContext,
    ToolOutcome,
)
from shared.contracts.records.messages import (
    AgentMessage,
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
)
from shared.mcp.tool_schema import argument_problem
from shared.storage.disk import storage_fault

TOOL_ABORT_GRACE_S = 1.0  # how long running tools may take to end on the abort signal before a cancel


async def run_loop(
    prompts: list[AgentMessage], context: AgentContext, config: LoopConfig, emit: Emit
) -> list[AgentMessage]:
    """Add `prompts` to the context and run until the agent stops; returns the new messages."""
    new: list[AgentMessage] = []
    await emit(AgentEvent(type="agent_start"))
    await emit(AgentEvent(type="turn_start"))
    for p in prompts:
        await _add(p, context, new, emit)
    return await _run(context, config, emit, new, first_turn=True)


async def run_loop_continue(context: AgentContext, config: LoopConfig, emit: Emit) -> list[AgentMessage]:
    """Continue from the current context (its last message must not be an assistant message)."""
    if context.messages and isinstance(context.messages[-1], AssistantMessage):
        raise ValueError("cannot continue from an assistant message")
    await emit(AgentEvent(type="agent_start"))
    await emit(AgentEvent(type="turn_start"))
    return await _run(context, config, emit, [], first_turn=True)


async def _add(m: AgentMessage, context: AgentContext, new: list[AgentMessage], emit: Emit) -> None:
    await emit(AgentEvent(type="message_start", data={"message": _head(m)}, message=m))
    context.messages.append(m)
    new.append(m)
    await emit(AgentEvent(type="message_end", data={"message": _dump(m)}, message=m))


async def _run(
    context: AgentContext, config: LoopConfig, emit: Emit, new: list[AgentMessage], first_turn: bool
) -> list[AgentMessage]:
    pending = await config.get_steering()
    tally = RunTally()
    while True:
        more_tools = True
        while more_tools or pending:
            if not first_turn:
                await emit(AgentEvent(type="turn_start"))
            first_turn = False
            for m in pending:
                await _add(m, context, new, emit)
            pending = []
            turn = await _turn(context, config, emit, new, tally)
            if turn is None:
                return new
            more_tools, guidance = turn
            pending = [*guidance, *await config.get_steering()]
        follow = await config.get_follow_up()
        if not follow:
            break
        pending = follow
    await emit(AgentEvent(type="agent_end", data={"stopReason": "stop"}))
    return new


async def _turn(context: AgentContext, config: LoopConfig, emit: Emit, new: list[AgentMessage],
                tally: RunTally) -> tuple[bool, list[AgentMessage]] | None:
    """One model call (unless the run's budget is spent) and its tool batch: whether tools ran and
    the guidance for the next call, or None when the run ended (its agent_end sent)."""
    spent = over_budget(tally, config.budget)
    guidance: list[AgentMessage] = []
    if spent is None:
        await config.before_model_call(context)
        message = await config.stream(context, emit, config.signal)
        tally.count(message)
        guidance = judge(message, tally)
    else:
        message, reached = spent
        if reached is not None:
            await emit(AgentEvent(type="budget_reached", data=reached.model_dump()))
        await emit(AgentEvent(type="message_start", data={"message": _head(message)}))
    context.messages.append(message)
    new.append(message)
    await emit(AgentEvent(type="message_end", data={"message": _dump(message)}, message=message))
    if message.stop_reason in ("error", "aborted", "contentFilter"):
        await emit(AgentEvent(type="turn_end", data={"stopReason": message.stop_reason}))
        await emit(AgentEvent(type="agent_end", data={"stopReason": message.stop_reason}))
        return None
    calls = message.tool_calls()
    if calls:
        if message.stop_reason == "length":  # cut at the output limit: partial arguments, not run
            results, terminate = await _cut_batch(calls, emit), False
        else:
            results, terminate = await _execute_batch(calls, context, config, emit)
        for r in results:
            await _add(r, context, new, emit)
        if terminate:
            await emit(AgentEvent(type="turn_end", data={"toolResults": len(calls)}))
            await emit(AgentEvent(type="agent_end", data={"stopReason": "yield"}))
            return None
    await emit(AgentEvent(type="turn_end", data={"toolResults": len(calls)}))
    if config.signal.is_set():
        await emit(AgentEvent(type="agent_end", data={"stopReason": "aborted"}))
        return None
    return bool(calls), guidance


async def _cut_batch(calls: list[ToolCall], emit: Emit) -> list[ToolResultMessage]:
    """The results of calls cut at the output limit: none of them runs (engine/reply_rules.py)."""
    results: list[ToolResultMessage] = []
    for call in calls:
        outcome = cut_call_outcome(call)
        await emit(AgentEvent(type="tool_execution_start", data={
            "toolCallId": call.id, "toolName": call.name}))
        await emit(AgentEvent(type="tool_execution_end", data={
            "toolCallId": call.id, "toolName": call.name, "isError": True, "result": outcome.content,
            "details": outcome.details}))
        results.append(ToolResultMessage(tool_call_id=call.id, tool_name=call.name,
                                         content=[TextContent(text=outcome.content)], details=outcome.details,
                                         is_error=True))
    return results


async def _execute_batch(
    calls: list[ToolCall], context: AgentContext, config: LoopConfig, emit: Emit
) -> tuple[list[ToolResultMessage], bool]:
    tools = {t.name: t for t in context.tools}
    preset = await config.prepare_batch(calls)
    for call in calls:
        await emit(AgentEvent(type="tool_execution_start", data={
            "toolCallId": call.id, "toolName": call.name}))

    async def one(call: ToolCall) -> ToolOutcome:
        with tool_span(call.name, call.id) as span:
            outcome = await run_one(call)
            record_tool(span, outcome.is_error)
            return outcome

    async def run_one(call: ToolCall) -> ToolOutcome:
        if call.id in preset:
            return preset[call.id]
        tool = tools.get(call.name)
        if tool is None:
            return ToolOutcome(content=f"Tool {call.name!r} not found.", is_error=True)
        problem = validate_arguments(tool, call.arguments)
        if problem:
            return ToolOutcome(content=problem, is_error=True)
        ctx = ToolContext(call=call, batch=calls, signal=config.signal, emit=emit)
        try:
            return await tool.execute(call.arguments, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a tool bug is the model's error value, not a crash
            fault = storage_fault(exc)  # the disk full or failing: say so, the agent may free space or wait
            if fault is not None:
                return ToolOutcome(content=f"Tool {call.name} failed: {fault}", is_error=True)
            return ToolOutcome(content=f"Tool {call.name} failed: {type(exc).__name__}: {exc}", is_error=True)

    outcomes = await _gather_abortable(calls, [asyncio.ensure_future(one(c)) for c in calls], config)
    results: list[ToolResultMessage] = []
    for call, outcome in zip(calls, outcomes, strict=True):
        await emit(AgentEvent(type="tool_execution_end", data={
            "toolCallId": call.id, "toolName": call.name, "isError": outcome.is_error,
            "result": outcome.content[:2000], "details": outcome.details}))
        results.append(ToolResultMessage(
            tool_call_id=call.id, tool_name=call.name, content=[TextContent(text=outcome.content)],
            images=outcome.images or None, details=outcome.details, is_error=outcome.is_error))
    terminate = bool(outcomes) and all(o.terminate for o in outcomes)
    return results, terminate


async def _gather_abortable(calls: list[ToolCall], tasks: list[asyncio.Task[ToolOutcome]],
                            config: LoopConfig) -> list[ToolOutcome]:
    """The batch's outcomes in call order. On abort, tools get TOOL_ABORT_GRACE_S to end on the
    signal (bash kills its process group at once); those still running are cancelled. A call that
    did not finish, or ended on the signal, gets the abort note as its result (every call gets one)."""
    stopper = asyncio.ensure_future(config.signal.wait())
    try:
        all_done = asyncio.ensure_future(asyncio.wait(tasks))
        await asyncio.wait({all_done, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not all_done.done():
            await asyncio.wait(tasks, timeout=TOOL_ABORT_GRACE_S)
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=TOOL_ABORT_GRACE_S)
        all_done.cancel()
    except asyncio.CancelledError:
        for t in tasks:
            t.cancel()
        raise
    finally:
        stopper.cancel()
    aborted = config.signal.is_set()
    out: list[ToolOutcome] = []
    for call, t in zip(calls, tasks, strict=True):
        outcome = t.result() if t.done() and not t.cancelled() and t.exception() is None else None
        if outcome is None and t.done() and not t.cancelled():  # it finished, failing: its own result
            exc = t.exception()
            outcome = ToolOutcome(content=f"Tool {call.name} failed: {type(exc).__name__}: {exc}", is_error=True)
        if outcome is None or (aborted and (outcome.details or {}).get("aborted")):
            outcome = aborted_outcome(config.signal.note, outcome)
        out.append(outcome)
    return out


def aborted_outcome(note: str, partial: ToolOutcome | None = None) -> ToolOutcome:
    """The result of a tool call stopped by an abort: the note first, then what it printed."""
    printed = partial.content.strip() if partial is not None else ""
    text = f"{note}\n\nOutput before the abort:\n{printed}" if printed else note
    return ToolOutcome(content=text, is_error=True, details={**((partial.details if partial else None) or {}),
                                                             "aborted": True})


def validate_arguments(tool: Tool, args: dict[str, Any]) -> str | None:
    """The model's arguments checked before the tool runs, so the model gets a clear error: against the
    tool's argument model (shared/mcp/tool_schema.py), or for a connector's tool, whose schema is data, the
    light check below (required keys, primitive types, unknown keys)."""
    if "__invalid_json__" in args:
        return f"Invalid JSON arguments for {tool.name}: {args['__invalid_json__'][:200]}"
    if tool.arguments is not None:
        return argument_problem(tool.name, tool.arguments, args)
    schema = tool.parameters
    missing = [k for k in schema.get("required", []) if k not in args]
    if missing:
        return f"Missing required argument(s) for {tool.name}: {', '.join(missing)}"
    types: dict[str, type | tuple[type, ...]] = {
        "string": str, "boolean": bool, "integer": int, "number": (int, float), "array": list, "object": dict}
    for key, value in args.items():
        spec = schema.get("properties", {}).get(key)
        if spec is None:
            if schema.get("additionalProperties") is False:
                return f"Unknown argument {key!r} for {tool.name}"
            continue
        expected = types.get(spec.get("type", ""))
        if expected is not None and not isinstance(value, expected):
            return f"Argument {key!r} of {tool.name} must be {spec['type']}"
        if spec.get("type") == "integer" and isinstance(value, bool):
            return f"Argument {key!r} of {tool.name} must be integer"
    return None


def _dump(m: AgentMessage) -> dict[str, Any]:
    return m.model_dump(by_alias=True, mode="json")


# What a message carries, sent once per message: in its `message_end`. Every event is written to Redis,
# kept in the session's events stream and sent to each SSE client, so a payload in two events cost all
# of them twice (a prompt, a tool result, an injection of any size: docs/architecture.md "Bounded work").
# A `message_start` names the message that starts, as a model reply's does before it has content, and
# `tool_execution_start` names the call, whose arguments are in the assistant's `message_end` just
# before it (services/runtime/README.md "Events").
_PAYLOAD = frozenset({"content", "images", "details", "summary"})


def _head(m: AgentMessage) -> dict[str, Any]:
    """The message without its payload (`_PAYLOAD`): a `message_start`'s."""
    return m.model_dump(by_alias=True, mode="json", exclude=set(_PAYLOAD))
