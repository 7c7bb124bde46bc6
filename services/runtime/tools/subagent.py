"""subagent: a child run with its own context; its result arrives later as a background_result."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.tools.ports import SubagentHost
from shared.mcp.tool_schema import ToolArgs


class SubagentArgs(ToolArgs):
    task: str = Field(description="The complete task for the child.")

def subagent_tool(host: SubagentHost) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        task = args["task"].strip()
        if not task:
            return ToolOutcome(content="task must not be empty.", is_error=True)
        child = await host.start_subagent(task, ctx.call.id)
        return ToolOutcome(
            content=f"Subagent {child} started. Its result arrives later as a background_result; continue "
            "with other work.", details={"subagent": child},
        )

    return Tool.typed(
        name="subagent",
        description="Start a child agent with its own context for a self-contained research task. It can "
        "read workspace files. Its result arrives later as a background_result message.",
        arguments=SubagentArgs,
        execute=execute,
    )
