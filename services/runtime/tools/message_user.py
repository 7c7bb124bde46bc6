"""message_user: the yield contract. blockOnUser=false continues the run; true terminates it and
must be the only call of its batch (the preflight turns it into an error result otherwise)."""

from __future__ import annotations

from typing import Any

from ..engine.types import Tool, ToolContext, ToolOutcome
from .host import ToolHost

ALONE_ERROR = ("message_user with blockOnUser=true must be the only tool call in its batch. Finish the other "
               "calls first, then call message_user alone when blockOnUser is true.")


def message_user_tool(host: ToolHost) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        block = bool(args["blockOnUser"])
        if block and len(ctx.batch) > 1:
            return ToolOutcome(content=ALONE_ERROR, is_error=True)
        if block:  # a completion is checked against the active workflows first (services/runtime/audit.py)
            refused = await host.audit_completion(args["message"], ctx.call.id)
            if refused is not None:
                return ToolOutcome(content=refused, is_error=True, details={"audit": "blocked"})
        await host.message_user(args["message"], block, ctx.call.id)
        if block:
            return ToolOutcome(content="Message delivered. Waiting for the user.",
                               details={"blockOnUser": True}, terminate=True)
        return ToolOutcome(content="Message delivered. Continue the task.", details={"blockOnUser": False})

    return Tool(
        name="message_user",
        description="Send a message to the user. blockOnUser=false for progress (the run continues); "
        "blockOnUser=true only when the task is complete or you need the user (the run stops). Call it "
        "alone when blockOnUser is true.",
        parameters={
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": "What the user reads."},
                "blockOnUser": {"type": "boolean", "description": "true yields control to the user."},
            },
            "required": ["message", "blockOnUser"],
            "additionalProperties": False,
        },
        execute=execute,
    )
