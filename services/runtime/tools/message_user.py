"""message_user: the yield contract. blockOnUser=false continues the run; true terminates it and
must be the only call of its batch (the preflight turns it into an error result otherwise).
`deviations` ({step, cause} per workflow step not done) is what the completion audit reads
(services/runtime/skillset/audit.py); it is part of the tool's schema from session start, so the request's
tool list never changes with the workflow."""

from __future__ import annotations

from typing import Any

from pydantic import Field, TypeAdapter, ValidationError

from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.tools.ports import MessageHost
from shared.contracts.records.transcript import MAX_DEVIATION_CAUSE, MAX_DEVIATIONS, Deviation
from shared.mcp.tool_schema import ToolArgs, optional

ALONE_ERROR = ("message_user with blockOnUser=true must be the only tool call in its batch. Finish the other "
               "calls first, then call message_user alone when blockOnUser is true.")
_DEVIATIONS: TypeAdapter[list[Deviation]] = TypeAdapter(list[Deviation])


def parse_deviations(raw: Any) -> list[Deviation] | str:
    """The declared deviations, or the error text (nothing is delivered on a malformed list)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_DEVIATIONS:
        return f"deviations must be a list of at most {MAX_DEVIATIONS} {{step, cause}} objects."
    try:
        return _DEVIATIONS.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"deviations[{where}]: {first['msg']}. Each deviation is {{step: a checklist step id, cause: why}}."


class DeviationArgs(ToolArgs):
    step: str = Field(description="The checklist step id.")
    cause: str = Field(max_length=MAX_DEVIATION_CAUSE, description="Why the step was not done.")


class MessageUserArgs(ToolArgs):
    message: str = Field(description="What the user reads.")
    block_on_user: bool = Field(alias="blockOnUser", description="true yields control to the user.")
    deviations: list[DeviationArgs] = optional(
        max_length=MAX_DEVIATIONS,
        description="Workflow checklist steps not done at this completion (empty or omitted: none).")

def message_user_tool(host: MessageHost) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        block = bool(args["blockOnUser"])
        if block and len(ctx.batch) > 1:
            return ToolOutcome(content=ALONE_ERROR, is_error=True)
        deviations = parse_deviations(args.get("deviations"))
        if isinstance(deviations, str):
            return ToolOutcome(content=f"Message NOT delivered: {deviations}", is_error=True)
        if block:  # a completion is checked against the active workflows first (services/runtime/skillset/audit.py)
            refused = await host.audit_completion(args["message"], deviations, ctx.call.id)
            if refused is not None:
                return ToolOutcome(content=refused, is_error=True, details={"audit": "blocked"})
        await host.message_user(args["message"], block, ctx.call.id)
        if block:
            return ToolOutcome(content="Message delivered. Waiting for the user.",
                               details={"blockOnUser": True}, terminate=True)
        return ToolOutcome(content="Message delivered. Continue the task.", details={"blockOnUser": False})

    return Tool.typed(
        name="message_user",
        description="Send a message to the user. blockOnUser=false for progress (the run continues); "
        "blockOnUser=true only when the task is complete or you need the user (the run stops). Call it "
        "alone when blockOnUser is true. At a completion, list in deviations each active workflow "
        "checklist step you did not do, with its cause.",
        arguments=MessageUserArgs,
        execute=execute,
    )
