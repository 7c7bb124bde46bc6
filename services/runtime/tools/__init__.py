"""The stable tool set, registered at session start in one fixed order (the schemas never change)."""

from __future__ import annotations

from services.runtime.engine.types import Tool, ToolOutcome
from services.runtime.skillset.skills import Skill
from services.runtime.tools.bash import bash_tool
from services.runtime.tools.files import edit_tool, read_tool, write_tool
from services.runtime.tools.message_user import ALONE_ERROR, message_user_tool
from services.runtime.tools.ports import ToolHost, WorkspaceHost
from services.runtime.tools.show import show_file_tool, show_gamma_tool
from services.runtime.tools.skill import plan_skill_batch, skill_tool
from services.runtime.tools.subagent import subagent_tool
from services.runtime.tools.todo import todo_tool
from services.runtime.tools.workspace_rule import NoteReader, read_workspace_rule_tool
from shared.contracts.records.messages import ToolCall

TOOL_ORDER = ("read", "bash", "write", "edit", "todo", "subagent", "show_gamma", "show_file", "skill",
              "message_user", "read_workspace_rule")


class Toolset:
    """The tools of one session plus the batch preflight that needs to see the whole batch."""

    def __init__(self, host: ToolHost, knowledge: NoteReader | None = None, inline_max: int = 16_000) -> None:
        self.host = host
        self._plans: dict[str, list[tuple[Skill, str | None]]] = {}
        self.tools: list[Tool] = [
            read_tool(host, host), bash_tool(host, host), write_tool(host, host), edit_tool(host, host), todo_tool(host),
            subagent_tool(host), show_gamma_tool(host), show_file_tool(host), skill_tool(host, self._plans),
            message_user_tool(host), read_workspace_rule_tool(host, knowledge, inline_max),
        ]
        assert tuple(t.name for t in self.tools) == TOOL_ORDER

    async def prepare_batch(self, calls: list[ToolCall]) -> dict[str, ToolOutcome]:
        preset: dict[str, ToolOutcome] = {}
        if len(calls) > 1:
            for c in calls:
                if c.name == "message_user" and c.arguments.get("blockOnUser") is True:
                    preset[c.id] = ToolOutcome(content=ALONE_ERROR, is_error=True)
        plan = plan_skill_batch(calls, self.host.skills, self.host.skill_scope)
        if plan.errors:
            return {**plan.errors, **preset}
        self._plans.update(plan.activations)
        return {**plan.outranked, **preset}


def readonly_tools(host: WorkspaceHost) -> list[Tool]:
    """A subagent's tools: it researches, it does not change the session."""
    return [read_tool(host)]
