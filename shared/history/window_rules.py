"""What a wake's window keeps of the history before it (docs/architecture.md "How a session wakes"):
where the latest compaction's kept entries begin, a live workflow's current task (capped), the skills
live at the window's start and the load results that stay in force past it. Pure rules over parsed
transcript lines; the transcript index (transcript_index.py) applies them at a rebuild, the live
window (services/runtime/store/transcript_window.py) at each compaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from shared.history.knowledge import parse_source_id
from shared.history.transcript_scan import Span

LOAD_TOOLS = ("load_tools", "read_workspace_rule")  # services/runtime/tools/tool_policy.py, tools/workspace_rule.py


def load_key(d: dict[str, Any]) -> str | None:
    """A successful `load_tools` or `read_workspace_rule` result's key (what it loaded), else None."""
    m = d.get("message")
    if d.get("type") != "message" or not isinstance(m, dict) or m.get("toolName") not in LOAD_TOOLS or m.get("isError"):
        return None
    details = m.get("details")
    if not isinstance(details, dict):
        return None
    key = details.get("namespace") if m["toolName"] == "load_tools" else details.get("knowledgeId")
    return f"{m['toolName']}:{key}" if isinstance(key, str) else None


def keep_loads(base: Iterable[dict[str, Any]], dropped: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The load results that stay in force past the window's start: a connector or tool namespace
    loaded, a knowledge note read and not retired by a newer workspace_update (services/runtime/
    knowledge.py `loaded_notes`). Loads live until the session ends, so a compaction that cut them
    must not unload them (docs/architecture.md "How a session wakes"): the last result of each key."""
    kept: dict[str, dict[str, Any]] = {}
    for d in (*base, *dropped):
        if (key := load_key(d)) is not None:
            kept.pop(key, None)
            kept[key] = d
        elif d.get("type") == "custom_message" and isinstance(details := d.get("details"), dict) \
                and details.get("injectionType") == "workspace_update":
            parsed = parse_source_id(str(details.get("sourceId", "")))
            note = kept.get(f"read_workspace_rule:{parsed[0]}") if parsed else None
            if parsed and note is not None and int(note["message"]["details"].get("revision", 0)) < parsed[1]:
                del kept[f"read_workspace_rule:{parsed[0]}"]
    return list(kept.values())


def window_start(kinds: dict[int, dict[str, Any]], rows: Sequence[Any], branch: Sequence[int]) -> int:
    """Position in `branch` where the latest compaction's kept entries begin (shared/history/context.py
    `kept_start_index`: a lost cut entry keeps nothing before the compaction); 0 without one."""
    for pos in range(len(branch) - 1, -1, -1):
        d = kinds.get(branch[pos])
        if d is not None and d.get("type") == "compaction":
            kept = d.get("firstKeptEntryId")
            for before in range(pos):  # the first match, as context.py's `index_of`
                row = rows[branch[before]]
                if row is not None and row.id == kept:  # any entry, a leaf move too, as context.py finds it
                    return before
            return pos
    return 0


TASK_SPAN_MAX = 8 << 20  # bytes of a live workflow's task kept before the context's window, at most


def task_start(marks: Iterable[tuple[int, dict[str, Any]]], start: int) -> int:
    """Where the earliest live workflow's current task begins, when before `start`: its latest
    activation, or just after its last final (not blocked) audit (services/runtime/skillset/audit.py
    `workflow_window`). `marks`: (position, kind) of the skill activations, ends and audits before
    `start`. The window keeps that task: its audit and checklist progress read the tool calls made
    since it began, also those a compaction summarized."""
    live: dict[str, int] = {}
    for pos, d in marks:
        kind, name = d.get("type"), d.get("name")
        if kind == "skill_activation" and d.get("skillType") == "workflow" and isinstance(name, str):
            live[name] = pos
        elif kind == "skill_end" and isinstance(name, str):
            live.pop(name, None)
        elif kind == "audit" and d.get("outcome") != "blocked" and d.get("workflow") in live:
            live[d["workflow"]] = pos + 1
    return min([start, *live.values()])


def capped(spans: Sequence[Span], begin: int, start: int, cap: int = TASK_SPAN_MAX) -> int:
    """`begin`, moved toward `start` until the lines in between hold at most `cap` bytes."""
    total = sum(n + 1 for _, n in spans[begin:start])
    while begin < start and total > cap:
        total -= spans[begin][1] + 1
        begin += 1
    return begin


def live_skills(kinds: dict[int, dict[str, Any]], indices: Iterable[int]) -> dict[str, int]:
    """name -> row index of its live activation after these rows (a `skill_end` ends it; the first
    activation of a name stays the live one: services/runtime/store/transcript.py `_on_branch`)."""
    live: dict[str, int] = {}
    for i in indices:
        d = kinds.get(i)
        if d is None or not isinstance(d.get("name"), str):
            continue
        if d.get("type") == "skill_activation":
            live.setdefault(d["name"], i)
        elif d.get("type") == "skill_end":
            live.pop(d["name"], None)
    return live
