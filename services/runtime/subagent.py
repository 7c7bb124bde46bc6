"""A subagent: a child loop with its own context and read-only tools. Its answer goes back through
the session's own inbox as a background_result Injection, so it is durable and recorded like any
other injection (follow-up delivery: after the active run stops)."""

from __future__ import annotations

import contextlib
from typing import Any

import structlog

from shared.contracts.inbox import Injection
from shared.contracts.injection import RuntimeInjection
from shared.contracts.messages import AssistantMessage, UserMessage
from shared.inbox import append

from .engine.loop import run_loop
from .engine.types import AgentContext, AgentEvent, LoopConfig, StreamFn
from .tools import ToolHost, readonly_tools

log = structlog.get_logger()
SUBAGENT_PROMPT = ("You are a research subagent of the Gamma agent. Complete the task with the read tool when "
                   "workspace files matter, then answer with your findings as plain text.")


async def run_subagent(host: ToolHost, stream: StreamFn, client: Any, child: str, task: str) -> None:
    """`stream`: a model stream of the child's own (no shared prefix); `client`: Redis, for the inbox."""
    context = AgentContext(SUBAGENT_PROMPT, [], readonly_tools(host))

    async def emit(_: AgentEvent) -> None:
        return None  # the child's own events stay internal; its result is what the parent sees

    messages = await run_loop([UserMessage(content=task)], context, LoopConfig(stream=stream), emit)
    final = next((m for m in reversed(messages) if isinstance(m, AssistantMessage)), None)
    text = final.text() if final is not None and final.stop_reason != "error" else (
        f"The subagent failed: {final.error_message if final else 'no answer'}")
    content = f'<background_result subagent="{child}">\n{text}\n</background_result>'
    with contextlib.suppress(Exception):
        await append(client, Injection(
            session_id=host.sid, injection=RuntimeInjection(kind="background_result", content=content),
            source="system", source_id=f"subagent:{child}"))
