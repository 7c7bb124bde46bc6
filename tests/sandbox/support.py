"""Drive a session's bash through the real runtime with `script:` prompts and read the tool result."""

from __future__ import annotations

import itertools
from typing import Any

from tests.integration.runtime_support import Driver, call, done, script, transcript
from tests.support.polling import wait_sync
from tests.support.stack import Stack

_ids = itertools.count()


def new_sid(stack: Stack, name: str) -> str:
    return f"{name}-{stack.layer}-{next(_ids)}"


def results(stack: Stack, sid: str, tool: str = "bash") -> list[dict[str, Any]]:
    return [e["message"] for e in transcript(stack.data_dir, sid)
            if e["type"] == "message" and e["message"]["role"] == "toolResult" and e["message"]["toolName"] == tool]


def run_tools(stack: Stack, sid: str, *calls: dict[str, Any], wait_s: float = 60) -> None:
    """One prompt whose scripted model makes `calls` (one step each) then answers; waits for agent_end."""
    d = Driver(stack.redis_url)
    ends = sum(1 for e in d.events(sid) if e["type"] == "agent_end")
    d.prompt(sid, script(*({"tool_calls": [c]} for c in calls), done()))
    if not d.live(sid):
        d.wake(sid)
    wait_sync(lambda: sum(1 for e in d.events(sid) if e["type"] == "agent_end") > ends, timeout=wait_s, interval=0.05,
              what=f"{sid}: the run to end", detail=lambda: f"runtime log tail: {stack.log('runtime')[-2000:]}")


def bash(stack: Stack, sid: str, command: str, timeout: int | None = None) -> dict[str, Any]:
    """Run one bash call in `sid`; the tool result message (content text under 'text')."""
    args: dict[str, Any] = {"command": command}
    if timeout is not None:
        args["timeout"] = timeout
    before = len(results(stack, sid))
    run_tools(stack, sid, call("bash", **args), wait_s=60 + (timeout or 0))
    # agent_end can be read before the transcript's line is on disk (the runtime writes off its loop)
    got = wait_sync(lambda: found if len(found := results(stack, sid)) > before else None, timeout=30,
                    interval=0.05, what=f"{sid}: the bash result in the transcript",
                    detail=lambda: f"transcript tail: {transcript(stack.data_dir, sid)[-3:]}; runtime log tail: "
                                   f"{stack.log('runtime')[-3000:]}")
    assert len(got) == before + 1, got
    msg = got[-1]
    msg["text"] = "".join(part.get("text", "") for part in msg["content"])
    return msg
