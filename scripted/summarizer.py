"""The offline summarizer model: a real structured summary of the conversation it is given.

It runs behind the real `openai` client (scripted/transport.py ScriptedTransport) and reads the same prompt a
real model reads. It extracts the goal from the first user request, constraints from the user's
words, done items from completed tool calls and todo updates, in-progress and next steps from the
latest todo state, decisions from the assistant's reasoning, and critical context (file paths,
injections, exact errors). Given a `<previous-summary>` it merges instead of starting over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from scripted.reading import Block, Request, Sections, parse_calls, parse_request, parse_summary
from scripted.types import ScriptedReply

MAX_ITEMS = 40
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_CONSTRAINT = re.compile(
    r"\b(must|must not|don't|do not|never|always|prefer|please keep|keep it|avoid|only|at most|no more than|"
    r"should|without|use a|use the)\b", re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(decided|decide|i'll use|i will use|going with|chose|choosing|instead of|opting|opted|because|so that)\b",
    re.IGNORECASE,
)
_ERROR = re.compile(r"^\s*(error|failed|refused|todo update refused|traceback)\b", re.IGNORECASE)
_TAG = re.compile(r"^<([a-z_]+)([^>]*)>(.*?)(?:</\1>)?\s*$", re.DOTALL)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_TODO_LINE = re.compile(r"^- \[(pending|in_progress|complete|blocked)\] ([^:]+): (.+)$", re.MULTILINE)


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _add(items: list[str], item: str) -> None:
    if item and item not in items:
        items.append(item)


@dataclass
class Todo:
    id: str
    content: str
    status: str


@dataclass
class Facts:
    goals: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    context: list[str] = field(default_factory=list)
    todo: list[Todo] | None = None
    last_assistant: str = ""
    waiting_on_user: str = ""


def _todo_from_args(args: dict[str, Any]) -> list[Todo] | None:
    items = args.get("items")
    if not isinstance(items, list):
        return None
    out = []
    for i in items:
        if isinstance(i, dict) and i.get("content"):
            out.append(Todo(str(i.get("id", "")), str(i["content"]), str(i.get("status", "pending"))))
    return out


def _describe_call(name: str, args: dict[str, Any]) -> str:
    path = args.get("path") or args.get("file_path")
    if name == "read" and path:
        return f"Read `{path}`"
    if name == "write" and path:
        return f"Wrote `{path}`"
    if name == "edit" and path:
        return f"Edited `{path}`"
    if name == "bash" and args.get("command"):
        return f"Ran `{_clip(str(args['command']), 80)}`"
    if name == "skill" and args.get("name"):
        return f"Loaded skill `{args['name']}`"
    if name == "show_file" and path:
        return f"Showed `{path}` to the user"
    if name == "show_gamma":
        what = args.get("doc") or args.get("document") or args.get("title") or args.get("id") or "a deck"
        return f"Opened Gamma document `{_clip(str(what), 60)}`"
    if name == "message_user" and args.get("message"):
        return f"Told the user: \"{_clip(str(args['message']), 150)}\""
    if name == "subagent":
        task = args.get("task") or args.get("prompt") or args.get("description") or ""
        return f"Started a subagent: {_clip(str(task), 120)}"
    shown = ", ".join(f"{k}={_clip(str(v), 40)}" for k, v in list(args.items())[:3])
    return f"Called `{name}`({shown})"


def _context_line(text: str) -> str:
    """An injection block: its kind, ref, and the first words of what it says."""
    m = _TAG.match(text.strip())
    if not m:
        return f"Context: {_clip(text, 160)}"
    attrs = dict(_ATTR.findall(m.group(2)))
    ref = attrs.get("ref")
    where = f" ({ref})" if ref else ""
    return f"{m.group(1)}{where}: {_clip(m.group(3), 160)}"


def _user_message(facts: Facts, text: str, first: bool) -> None:
    sentences = _sentences(text)
    if not sentences:
        return
    if first:
        _add(facts.goals, _clip(sentences[0], 300))
        rest = sentences[1:]
    else:
        rest = sentences
    for s in rest:
        if _CONSTRAINT.search(s):
            _add(facts.constraints, _clip(s, 200))
        elif not first and len(s.split()) >= 4:
            _add(facts.goals, _clip(s, 300))


def extract(blocks: list[Block]) -> Facts:
    facts = Facts()
    first_user = True
    pending_calls: list[tuple[str, dict[str, Any]]] = []
    for block in blocks:
        if block.label == "User":
            _user_message(facts, block.text, first_user)
            first_user = False
            facts.waiting_on_user = ""  # the user spoke: an earlier question is answered
        elif block.label == "Context":
            _add(facts.context, _context_line(block.text))
        elif block.label == "Assistant":
            facts.last_assistant = block.text
            for s in _sentences(block.text):
                if _DECISION.search(s):
                    _add(facts.decisions, _clip(s, 200))
        elif block.label == "Assistant tool calls":
            calls = parse_calls(block.text)
            pending_calls.extend(calls)
            for name, args in calls:
                if name == "message_user" and args.get("blockOnUser"):
                    facts.waiting_on_user = _clip(str(args.get("message", "")), 200)
        elif block.label == "Tool result":
            name, args = pending_calls.pop(0) if pending_calls else ("tool", {})
            _tool_result(facts, name, args, block.text)
    for name, args in pending_calls:  # calls whose results are outside this span
        _add(facts.done, _describe_call(name, args) + " (result not shown)")
    return facts


def _tool_result(facts: Facts, name: str, args: dict[str, Any], text: str) -> None:
    if _ERROR.match(text):
        _add(facts.blocked, f"`{name}` failed: {_clip(text.splitlines()[0], 200)}")
        _add(facts.context, f"Error from `{name}`: {_clip(text.splitlines()[0], 200)}")
        return
    if name == "todo":
        todo = _todo_from_args(args)
        if todo is None:
            todo = [Todo(m.group(2), m.group(3), m.group(1)) for m in _TODO_LINE.finditer(text)]
        facts.todo = todo
        for item in todo:
            if item.status == "complete":
                _add(facts.done, item.content)
        return
    _add(facts.done, _describe_call(name, args))
    path = args.get("path") or args.get("file_path")
    if path:
        _add(facts.context, f"File `{path}`")


def _focus_lines(blocks: list[Block], focus: str) -> list[str]:
    """Sentences of the conversation that mention the words of the requested focus."""
    words = {w.lower() for w in re.findall(r"[A-Za-z][\w-]{3,}", focus)}
    found: list[str] = []
    for block in blocks:
        for s in _sentences(block.text):
            if words & {w.lower() for w in re.findall(r"[A-Za-z][\w-]{3,}", s)}:
                _add(found, _clip(s, 200))
    return found[:8]


def _section(title: str, items: list[str], fmt: str = "- {}", empty: str = "- (none)") -> str:
    if len(items) > MAX_ITEMS:
        items = [f"({len(items) - MAX_ITEMS} earlier items omitted)", *items[-MAX_ITEMS:]]
    body = "\n".join(fmt.format(i, n=n + 1) for n, i in enumerate(items)) if items else empty
    return f"{title}\n{body}"


def summarize(request: Request) -> str:
    facts = extract(request.conversation)
    prev = parse_summary(request.previous_summary) if request.previous_summary else Sections()
    todo = facts.todo or []
    in_progress = [t.content for t in todo if t.status == "in_progress"]
    pending = [t.content for t in todo if t.status == "pending"]
    blocked_tasks = [f"Task blocked: {t.content}" for t in todo if t.status == "blocked"]

    goals = list(prev.get("## Goal"))
    for g in facts.goals:
        _add(goals, g)
    constraints = list(prev.get("## Constraints & Preferences"))
    for c in facts.constraints:
        _add(constraints, c)
    done = list(prev.get("### Done"))
    if facts.todo is None:
        current = list(prev.get("### In Progress"))
    else:  # the todo list is the truth about what is in progress now
        current = in_progress
        for item in prev.get("### In Progress"):
            if item not in in_progress and item not in pending:
                _add(done, item)
    for d in facts.done:
        _add(done, d)
    blocked = [*facts.blocked, *blocked_tasks]
    if not blocked and not facts.done:
        blocked = list(prev.get("### Blocked"))
    decisions = list(prev.get("## Key Decisions"))
    for d in facts.decisions:
        _add(decisions, f"**{d.split(' because ')[0].rstrip('.')}**: "
                        + (d.split(" because ", 1)[1] if " because " in d else "stated in the conversation"))
    steps = [f"Finish: {t}" for t in in_progress] + pending
    if facts.waiting_on_user:
        steps.insert(0, f"Wait for the user's answer to: \"{facts.waiting_on_user}\"")
    if not steps:
        steps = list(prev.get("## Next Steps"))
    if not steps and facts.last_assistant:
        steps = [f"Continue from: {_clip(facts.last_assistant, 200)}"]
    context = list(prev.get("## Critical Context"))
    for c in facts.context:
        _add(context, c)
    if request.focus:
        _add(context, f"Requested focus: {_clip(request.focus, 200)}")
        for line in _focus_lines(request.conversation, request.focus):
            _add(context, f"On the focus: {line}")

    return "\n\n".join([
        _section("## Goal", goals, "- {}", "- (not stated in the summarized messages)"),
        _section("## Constraints & Preferences", constraints),
        "## Progress\n" + _section("### Done", done, "- [x] {}", "- (nothing completed yet)"),
        _section("### In Progress", current, "- [ ] {}", "- (nothing in progress)"),
        _section("### Blocked", blocked),
        _section("## Key Decisions", decisions),
        _section("## Next Steps", steps, "{n}. {}", "1. Ask the user what to do next"),
        _section("## Critical Context", context),
    ])


def summarize_turn_prefix(request: Request) -> str:
    facts = extract(request.conversation)
    opening = next((b.text for b in request.conversation if b.label in ("User", "Context")), "")
    suffix_context = [*facts.context]
    if facts.todo:
        suffix_context += [f"Task {t.status}: {t.content}" for t in facts.todo if t.status != "complete"]
    if facts.last_assistant:
        suffix_context.append(f"Last stated: {_clip(facts.last_assistant, 200)}")
    return "\n\n".join([
        "## Original Request\n" + (_clip(opening, 400) or "(not shown)"),
        _section("## Early Progress", [*facts.done, *(f"Decision: {d}" for d in facts.decisions)]),
        _section("## Context for Suffix", suffix_context),
    ])


def scripted_summarizer(body: dict[str, Any]) -> ScriptedReply:
    """A `ScriptedModel` for the summarization calls of the compaction service."""
    request = parse_request(body)
    text = summarize_turn_prefix(request) if request.turn_prefix else summarize(request)
    prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    return ScriptedReply(content=text, prompt_tokens=prompt_chars // 4, completion_tokens=len(text) // 4)
