"""Dormant preview (docs/architecture.md "Ownership": the proxy serves a dormant session from its disk): what a client renders without a runtime,
read straight from the session disk: display entries of `transcript.jsonl`, `state.json`, `todo.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shared.contracts.records.todo import TodoList
from shared.history.transcript_index import window_lines
from shared.storage.disk import SessionPaths, read_json
from shared.ui.uirules import repair_snapshot


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("type") == "text")
    return ""


def _args(call: dict[str, Any]) -> dict[str, Any]:
    args = call.get("arguments")
    if isinstance(args, str):  # some writers keep the raw JSON string of the tool call
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return {}
    return args if isinstance(args, dict) else {}


def _refused_calls(entries: list[dict[str, Any]]) -> set[Any]:
    """message_user calls whose result is an error (a completion audit refused it, or it was not alone):
    the user never saw them."""
    out = set()
    for entry in entries:
        m = entry.get("message") if entry.get("type") == "message" else None
        if isinstance(m, dict) and m.get("role") == "toolResult" and m.get("toolName") == "message_user" and m.get("isError"):
            out.add(m.get("toolCallId"))
    return out


def display_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """User and assistant messages, delivered message_user tool calls, and custom messages marked `display`."""
    out: list[dict[str, Any]] = []
    undelivered = _refused_calls(entries)
    for entry in entries:
        base = {"id": entry.get("id"), "timestamp": entry.get("timestamp")}
        kind = entry.get("type")
        if kind == "message":
            message = entry.get("message") or {}
            role = message.get("role")
            if role == "user":
                out.append({**base, "kind": "user", "text": _text(message.get("content"))})
            elif role == "assistant":
                text = _text(message.get("content"))
                if message.get("implicitMessageUser"):  # plain text or a refusal that ended the run
                    refused = bool(message.get("refusal")) and not text.strip()
                    out.append({**base, "kind": "message_user", "blockOnUser": True, "implicit": True,
                                "refusal": refused,
                                "text": f"The model refused: {message['refusal']}" if refused else text})
                elif text.strip():
                    out.append({**base, "kind": "assistant", "text": text})
                for part in message.get("content") or []:
                    if (isinstance(part, dict) and part.get("type") == "toolCall" and part.get("name") == "message_user"
                            and part.get("id") not in undelivered):
                        args = _args(part)
                        out.append({
                            **base, "kind": "message_user", "text": str(args.get("message", "")),
                            "blockOnUser": bool(args.get("blockOnUser", args.get("block_on_user", False))),
                            "toolCallId": part.get("id"),
                        })
            elif role == "custom" and message.get("display"):
                out.append({**base, "kind": "custom", "customType": message.get("customType"),
                            "text": _text(message.get("content"))})
        elif kind == "custom_message" and entry.get("display"):
            out.append({**base, "kind": "custom", "customType": entry.get("customType"), "text": _text(entry.get("content"))})
    return out


def read_transcript(paths: SessionPaths) -> list[dict[str, Any]]:
    """The active branch since the latest compaction's first kept entry (the window of the transcript
    index, docs/architecture.md "How a session wakes"): a glance at a dormant session costs the same at
    any length of history; the whole branch is `GET /transcript`'s pages."""
    return window_lines(paths.transcript)


def read_ui(paths: SessionPaths) -> dict[str, Any]:
    """state.json, valid: the proxy and the runtime write only validated snapshots, and one written
    before that rule is repaired on read (shared.ui.uirules.repair_snapshot), so it cannot refuse every sync."""
    return repair_snapshot(_read_json(paths.state))


def read_todo(paths: SessionPaths) -> TodoList:
    value = _read_json(paths.todo)
    if not isinstance(value, dict):
        return TodoList()
    try:
        return TodoList.model_validate(value)
    except ValidationError:
        return TodoList()


def _read_json(path: Path) -> Any:
    try:
        return read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError, IsADirectoryError):
        return None
