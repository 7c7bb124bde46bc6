"""todo: replace the task list (while any task is open, exactly one in_progress); the result carries the
list as details."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.store.todo import TodoRefused, render
from services.runtime.tools.ports import TodoHost
from shared.mcp.tool_schema import ToolArgs


class TodoItemArgs(ToolArgs):
    id: str
    content: str
    status: Literal["pending", "in_progress", "complete", "blocked"]
    reason: str | None = Field(None, description="Blocked tasks: what the task waits for.")


class TodoArgs(ToolArgs):
    items: list[TodoItemArgs]

def todo_tool(host: TodoHost) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        items = args.get("items")
        if not isinstance(items, list):
            return ToolOutcome(content="items must be a list of {id, content, status}.", is_error=True)
        try:
            todo = await host.todo.update(items)
        except TodoRefused as exc:
            return ToolOutcome(content=f"Todo update refused: {exc}", is_error=True,
                               details={"todo": host.todo.current.model_dump()})
        await host.todo_changed(todo, ctx.call.id)
        return ToolOutcome(content=render(todo), details={"todo": todo.model_dump()})

    return Tool.typed(
        name="todo",
        description="Replace the task list shown to the user. Send every task each time. Statuses: pending, "
        "in_progress, complete, blocked; while any task is pending or in_progress, exactly one is in_progress, "
        "unless a task waits: mark it blocked with its reason and later tasks may stay pending.",
        arguments=TodoArgs,
        execute=execute,
    )
