"""A subagent: a child loop with its own context and read-only tools. Its answer goes back through
the session's own inbox as a background_result Injection, so it is durable and recorded like any
other injection (follow-up delivery: after the active run stops).

A subagent belongs to the run that started it: an abort or an interrupt (abort.py) stops it with the
run. Its model stream is cut on its own abort signal, and its answer is still sent, saying the user
stopped it, with what it had found so far, as an aborted tool call of the run is answered."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from services.runtime.engine.loop import run_loop
from services.runtime.engine.types import AgentContext, AgentEvent, LoopConfig, StreamFn
from services.runtime.tools import readonly_tools
from services.runtime.tools.ports import WorkspaceHost
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.messages import AssistantMessage, UserMessage
from shared.contracts.streams.inbox import Injection
from shared.streams.inbox import append
from shared.trust.trusted_blocks import lines, quoted, render

log = structlog.get_logger()
SUBAGENT_PROMPT = ("You are a research subagent of the Gamma agent. Complete the task with the read tool when "
                   "workspace files matter, then answer with your findings as plain text.")
STOPPED_NOTE = "The subagent was stopped before it finished (the session shut down); its findings may be partial."
CANCEL_WAIT_S = 5.0


class ChildHost(WorkspaceHost, Protocol):
    """A subagent's session: its workspace, read-only, and the id its answer goes to."""

    sid: str


async def run_subagent(host: ChildHost, config: LoopConfig, client: Any, child: str, task: str) -> None:
    """`config.stream`: a model stream of the child's own (no shared prefix); `config.signal` stops
    it (Subagents.stop); `client`: Redis, for the inbox."""
    context = AgentContext(SUBAGENT_PROMPT, [], readonly_tools(host))
    said: list[AssistantMessage] = []

    async def emit(event: AgentEvent) -> None:
        # The child's own events stay internal; its last message is what the parent sees.
        if event.type == "message_end" and isinstance(event.message, AssistantMessage):
            said.append(event.message)

    cancelled = False
    try:
        await run_loop([UserMessage(content=task)], context, config, emit)
    except asyncio.CancelledError:
        cancelled = True  # past the stop's grace, or the session's shutdown: still answer, then end
    stopped = cancelled or config.signal.is_set()
    note = config.signal.note if config.signal.is_set() else STOPPED_NOTE
    text = answer_text(said[-1] if said else None, note if stopped else None)
    content = background_result(child, text, stopped)
    with contextlib.suppress(Exception):
        await append(client, Injection(
            session_id=host.sid, injection=RuntimeInjection(kind="background_result", content=content),
            source="system", source_id=f"subagent:{child}"))
    if cancelled:
        raise asyncio.CancelledError


def background_result(child: str, text: str, stopped: bool) -> str:
    """The child's answer is model-written (and may echo what it read): quoted, never the harness's words."""
    return render("background_result", {"subagent": child, "status": "stopped" if stopped else None},
                  lines("The subagent answered:", quoted("subagent", text)))


def answer_text(final: AssistantMessage | None, stopped_note: str | None) -> str:
    """The child's answer; when it was stopped, the note first and then what it had said."""
    if stopped_note is not None:
        partial = final.text() if final is not None else ""
        return f"{stopped_note}\n\nFindings before the stop:\n{partial}" if partial else stopped_note
    if final is not None and final.stop_reason != "error":
        return final.text()
    return f"The subagent failed: {final.error_message if final else 'no answer'}"


@dataclass
class _Child:
    task: asyncio.Task[None]
    config: LoopConfig


class Subagents:
    """The session's running subagents, so the run's abort reaches them too."""

    def __init__(self, host: ChildHost, stream: Callable[[], StreamFn], client: Any,
                 background: set[asyncio.Task[None]]) -> None:
        self.host = host
        self.stream = stream  # a fresh model stream per subagent
        self.client = client
        self.background = background  # the session's background tasks (cancelled at shutdown)
        self.children: dict[str, _Child] = {}

    def start(self, task: str, tool_call_id: str) -> str:
        child = f"sa_{tool_call_id[-8:]}"
        config = LoopConfig(stream=self.stream())
        t = asyncio.ensure_future(run_subagent(self.host, config, self.client, child, task))
        self.children[child] = _Child(t, config)
        self.background.add(t)
        t.add_done_callback(self.background.discard)
        t.add_done_callback(lambda _: self.children.pop(child, None))
        return child

    async def stop(self, note: str, grace_s: float) -> int:
        """Stop every running subagent; returns once each has sent its answer (or was cancelled
        past `grace_s`). The number stopped."""
        running = [c for c in self.children.values() if not c.task.done()]
        for c in running:
            c.config.signal.abort(note)
        if not running:
            return 0
        _, late = await asyncio.wait({c.task for c in running}, timeout=grace_s)
        for t in late:
            t.cancel()
        if late:
            log.warning("abort_cancels_subagents", session_id=self.host.sid, count=len(late))
            await asyncio.wait(late, timeout=CANCEL_WAIT_S)
        return len(running)
