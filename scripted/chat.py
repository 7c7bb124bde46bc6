"""The scripted model's Chat Completions shape: a reply as a completion or as streamed chunks
(reference §3.2: finish reasons, the usage chunk, `[DONE]`)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from scripted.pacing import Timing
from scripted.strict import replies
from scripted.types import ScriptedReply, ScriptedToolCall


def finish(reply: ScriptedReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def usage(reply: ScriptedReply, prompt: int, cached: int, reasoning: int, written: int = 0) -> dict[str, Any] | None:
    """None: no usage (the `null`/`absent` variants; a server that ignores `include_usage`, §3.2/§5)."""
    if reply.usage == "absent":
        return None
    return replies.chat_usage(reply.usage, prompt, cached, reply.completion_tokens, reasoning, written)


def _args(c: ScriptedToolCall) -> str:
    return json.dumps(c.arguments) if c.raw_arguments is None else c.raw_arguments


def completion(reply: ScriptedReply, model: str, use: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None, "refusal": reply.refusal or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _args(c)}}
            for c in reply.tool_calls
        ]
    out = {
        "id": "chatcmpl-" + uuid.uuid4().hex[:12],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish(reply)}],
    }
    if use is not None:
        out["usage"] = use
    return out


def sse(reply: ScriptedReply, model: str, use: dict[str, Any] | None, timing: Timing) -> list[tuple[bytes, bool]]:
    """The chunks, each marked when it carries a token (paced by `timing`)."""
    cid = "chatcmpl-" + uuid.uuid4().hex[:12]
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
        payload: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else [],
        }
        if usage is not None:
            payload["usage"] = usage
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    out = [(chunk({"role": "assistant", "content": ""}), False)]
    text, step = reply.content, timing.step(64)  # a few deltas, or one token each when paced
    for i in range(0, len(text), step):
        out.append((chunk({"content": text[i : i + step]}), True))
    if reply.refusal:
        out.append((chunk({"refusal": reply.refusal}), True))
    if reply.stream_error is not None:  # Chat's in-stream error: a chunk carrying `{"error": {...}}` (§3.2)
        error = {"code": reply.stream_error.get("code"), "message": reply.stream_error.get("message", "")}
        return [out[0], (b"data: " + json.dumps({"error": {**error, "type": "server_error"}}).encode()
                         + b"\n\n", True)]
    step = timing.step(128)
    for index, call in enumerate(reply.tool_calls):
        args = _args(call)
        out.append((chunk({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                           "function": {"name": call.name, "arguments": ""}}]}), False))
        for i in range(0, len(args), step):
            out.append((chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i : i + step]}}]}),
                        True))
    if reply.no_terminal:  # the body ends without a finish_reason and without [DONE] (§3.2)
        return out
    out.append((chunk({}, finish=finish(reply)), False))
    if use is not None:
        out.append((chunk({}, usage=use), False))
    out.append((b"data: [DONE]\n\n", False))
    return out
