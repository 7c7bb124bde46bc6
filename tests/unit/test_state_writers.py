"""One writer per piece of session state (services/runtime/live/state.py): the run's fields are written by
the run supervisor only, the inbox's by the inbox dispatcher only, the lifecycle's by lifecycle.py
only (the session moves it through its verbs). Every other module reads them through the read-only
`SessionState` view. A scan of the runtime's source for assignments and collection mutations pins it."""

from __future__ import annotations

import ast
import dataclasses
from collections import defaultdict
from pathlib import Path

from services.runtime.hosting.lifecycle import Lifecycle
from services.runtime.live.state import InboxState, RunState, SessionState

RUNTIME = Path(__file__).resolve().parents[2] / "services" / "runtime"
MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "add", "discard", "update",
                      "setdefault", "popitem", "appendleft", "sort", "reverse"})
# field -> the one module that writes it
WRITERS: dict[str, str] = {
    **dict.fromkeys(("run_task", "run_id", "last_run_id", "aborting", "ended_at"), "runs/supervisor.py"),
    **dict.fromkeys(("held", "barrier_passed", "stop_requested", "stop_replies", "taken_at"), "inbox/dispatcher.py"),
    **dict.fromkeys(("_phase", "_loop_task"), "hosting/lifecycle.py"),
}
NEVER_REBOUND = ("queue", "turn_lock")  # a channel and a lock: created once, never replaced
# A receiver that may be one of the state's parts (or the view): `self.run`, `inbox`, `session.state`...
# (a bare `self.<field>` is another object's own field: the Outbox's run_id, the causal gate's held);
# the lifecycle's private fields count through any receiver.
PARTS = {"run", "_run", "inbox", "_inbox", "state", "_state", "life", "_life"}
PRIVATE = ("_phase", "_loop_task")


def _receiver(node: ast.expr) -> str | None:
    """The last name of an attribute's receiver (`self.run.run_id` -> "run", `state.held` -> "state")."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        out: list[ast.expr] = []
        for target in node.targets:
            out.extend(target.elts if isinstance(target, ast.Tuple) else [target])
        return out
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
        return [node.func.value]  # `x.held.append(...)` moves x.held
    return []


def writes() -> dict[str, set[str]]:
    """field -> the runtime modules that assign or mutate it through a receiver that may be a state part."""
    found: dict[str, set[str]] = defaultdict(set)
    fields = set(WRITERS) | set(NEVER_REBOUND) | _view_properties()
    for path in RUNTIME.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            for target in _targets(node):
                if isinstance(target, ast.Attribute) and target.attr in fields and (
                        target.attr in PRIVATE or _receiver(target.value) in PARTS):
                    found[target.attr].add(path.relative_to(RUNTIME).as_posix())
    return found


def _view_properties() -> set[str]:
    return {name for name, value in vars(SessionState).items() if isinstance(value, property)}


def test_the_tables_cover_every_field_of_the_state() -> None:
    parts = {f.name for cls in (RunState, InboxState) for f in dataclasses.fields(cls)}
    assert parts == (set(WRITERS) - set(PRIVATE)) | set(NEVER_REBOUND)
    assert set(PRIVATE) <= set(vars(Lifecycle()))


def test_each_state_field_has_one_writer() -> None:
    found = writes()
    # Every field is written, by its owner and nobody else (the owner's own module included).
    wrong = {field: sorted(modules) for field, modules in found.items()
             if field in WRITERS and modules != {WRITERS[field]}}
    assert wrong == {}
    assert set(WRITERS) - set(PRIVATE) <= set(found)  # the scan sees the writers it pins


def test_nobody_rebinds_the_channels_or_writes_through_the_view() -> None:
    found = writes()
    assert not any(found.get(name) for name in NEVER_REBOUND)
    # The view's properties have no setters; a write through `state.<name>` would also fail at mypy.
    view_only = _view_properties() - set(WRITERS)
    assert {name: modules for name, modules in found.items() if name in view_only} == {}
