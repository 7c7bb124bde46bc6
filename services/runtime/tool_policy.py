"""Dynamic tool loading behind `GAMMA_DYNAMIC_TOOLS` (seed: "Later tool growth"): tool namespaces with
an active subset, the way Pi's `setActiveToolsByName()` narrows its registered tools.

Every tool stays registered; before each model call the session's `context.tools` becomes the active
subset (the request's tool schemas, and the tools the loop may run). Active: the `core` namespace,
the namespaces the active skills need (`SKILL_NAMESPACES`), and any the model loaded with
`load_tools({namespace})`. All of it derives from the transcript (skill activations, load_tools
results), so a wake or a compaction restores the same subset. Off (the default), the tool list is
the stable set and never changes. `make bench-prefix` measures what the subset costs the cached prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.contracts.transcript import MessageEntry, SkillActivationEntry, TranscriptEntry

from .engine.types import AgentContext, BeforeModelCall, Tool, ToolContext, ToolOutcome

LOAD_TOOLS = "load_tools"
NAMESPACES: dict[str, tuple[str, ...]] = {
    "core": ("read", "bash", "write", "edit", "todo", "skill", "message_user", "read_workspace_rule", LOAD_TOOLS),
    "gamma": ("show_gamma", "show_file"),  # decks, files and forms shown in the user's panes
    "agents": ("subagent",),
}
SKILL_NAMESPACES: dict[str, tuple[str, ...]] = {
    "deck-generation": ("gamma",), "gml-editing": ("gamma",), "import": ("gamma",), "ask-user-questions": ("gamma",),
}


def active_namespaces(entries: Sequence[TranscriptEntry]) -> set[str]:
    active = {"core"}
    for e in entries:
        if isinstance(e, SkillActivationEntry):
            active.update(SKILL_NAMESPACES.get(e.name, ()))
        elif isinstance(e, MessageEntry) and getattr(e.message, "tool_name", None) == LOAD_TOOLS:
            d = getattr(e.message, "details", None) or {}
            if not getattr(e.message, "is_error", False) and d.get("namespace") in NAMESPACES:
                active.add(str(d["namespace"]))
    return active


def load_tools_tool() -> Tool:
    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        ns = str(args["namespace"])
        if ns not in NAMESPACES:
            return ToolOutcome(content=f"Unknown namespace {ns!r}; one of: {', '.join(sorted(NAMESPACES))}.",
                               is_error=True)
        return ToolOutcome(content=f"Loaded {ns}: {', '.join(NAMESPACES[ns])}. Available from your next step.",
                           details={"namespace": ns})

    listing = "; ".join(f"{ns}: {', '.join(names)}" for ns, names in NAMESPACES.items() if ns != "core")
    return Tool(
        name=LOAD_TOOLS,
        description=f"Make a tool namespace available from your next step ({listing}). Skills that need a "
        "namespace load it with the skill.",
        parameters={"type": "object", "properties": {"namespace": {"type": "string", "enum": sorted(NAMESPACES)}},
                    "required": ["namespace"], "additionalProperties": False},
        execute=execute,
    )


class ToolPolicy:
    """Sets the active subset before each model call, then runs the next hook (the compactor's)."""

    def __init__(self, registered: list[Tool], entries: Any, then: BeforeModelCall) -> None:
        self.registered = [*registered, load_tools_tool()]
        self.entries = entries  # () -> the transcript's entries
        self.then = then
        self._active: tuple[int, list[Tool]] = (-1, [])  # (entries seen, the subset): the transcript only grows

    def active_tools(self) -> list[Tool]:
        entries = self.entries()
        if self._active[0] != len(entries):
            names = {n for ns in active_namespaces(entries) for n in NAMESPACES[ns]}
            self._active = (len(entries), [t for t in self.registered if t.name in names])
        return list(self._active[1])

    async def before_model_call(self, context: AgentContext) -> None:
        context.tools = self.active_tools()
        await self.then(context)

