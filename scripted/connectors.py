"""The scripted model's connector scenario (docs/architecture.md "Connectors"): a prompt that asks
"the connector NAME" (optionally "for TOOL") loads its namespace, calls the tool with no arguments,
and reports its answer, so an offline session (`make run`, GAMMA_DYNAMIC_TOOLS=1) exercises a
connector end to end. Steps follow the model calls after the prompt."""

from __future__ import annotations

import re
from typing import Any

from scripted.types import ScriptedReply, ScriptedToolCall

CONNECTOR_RE = re.compile(r"\bconnector\s+([a-z][a-z0-9_-]{0,40})(?:\s+for\s+([a-z][a-z0-9_]{0,20}))?")


def _say(text: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[ScriptedToolCall(name="message_user",
                                                      arguments={"message": text, "blockOnUser": True})])


def connector_reply(prompt: str, tools: set[str], messages: list[dict[str, Any]], step: int) -> ScriptedReply | None:
    m = CONNECTOR_RE.search(prompt)
    if m is None or "load_tools" not in tools:
        return None
    name, wanted = m.group(1), m.group(2)
    if step == 0:
        return ScriptedReply(tool_calls=[ScriptedToolCall(name="load_tools",
                                                          arguments={"namespace": f"connector:{name}"})])
    if step == 1:
        offered = sorted(t for t in tools if t.startswith(f"{name}__"))
        tool = f"{name}__{wanted}" if wanted else (offered[0] if offered else None)
        if tool is None or tool not in tools:
            return _say(f"The connector {name} is not available here.")
        return ScriptedReply(tool_calls=[ScriptedToolCall(name=tool, arguments={})])
    if step == 2:
        answer = next((str(x.get("content", "")) for x in reversed(messages) if x.get("role") == "tool"), "")
        return _say(f"The connector {name} answered: {answer[:500]}")
    return None
