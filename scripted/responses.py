"""The scripted model's Responses API: request items -> the chat shape the scripted models read,
and a reply -> the streaming events OpenAI sends (parsed offline by the real SDK).

Reasoning items carry an `encrypted_content` that names the model that made it; a replayed item
made by another model is refused with a 400, as a real provider refuses content it cannot decrypt.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from scripted.pacing import Timing
from scripted.strict import replies

if TYPE_CHECKING:
    from scripted.types import ScriptedReply

# Events that carry a token (paced when the model has a rate).
TOKEN_EVENTS = frozenset({"response.output_text.delta", "response.function_call_arguments.delta",
                          "response.reasoning_summary_text.delta", "response.refusal.delta", "error",
                          "response.failed"})


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as a Chat Completions body: assistant-side items of one turn (reasoning,
    message, function calls) become one assistant message; reasoning items kept under `reasoning`."""
    items = list(body.get("input") or [])
    system = body.get("instructions") or ""
    if "instructions" not in body and items and items[0].get("role") in ("system", "developer"):
        system = _text(items.pop(0).get("content"))  # the prompt as marked blocks (GPT-5.6+, docs/cache.md)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]

    def assistant() -> dict[str, Any]:
        if messages[-1].get("role") != "assistant":
            messages.append({"role": "assistant", "content": None})
        return messages[-1]

    for n, item in enumerate(items, start=len(body.get("input") or []) - len(items)):
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "assistant":
            a = assistant()
            a["content"] = (a["content"] or "") + _text(item.get("content"))
        elif kind == "message":
            role = item.get("role") if item.get("role") in ("system", "developer") else "user"
            messages.append({"role": role, "content": _text(item.get("content"))})
            parts = item.get("content")  # a string (no images), or a list of parts: never walk a string
            images = [f"input[{n}].content[{j}]" for j, p in enumerate(parts if isinstance(parts, list) else [])
                      if isinstance(p, dict) and p.get("type") == "input_image"]
            if images:  # the text the model reads drops them; a failure script may refuse them
                messages[-1]["image_params"] = images
        elif kind == "function_call":
            assistant().setdefault("tool_calls", []).append({
                "id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments", "")}})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": _text(item.get("output"))})
        elif kind == "reasoning":
            assistant().setdefault("reasoning", []).append(item)
    tools = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters") if k in t}}
             for t in body.get("tools") or [] if t.get("type") == "function"]
    out: dict[str, Any] = {"model": body.get("model"), "messages": messages, "stream": body.get("stream")}
    if tools:
        out["tools"] = tools
    return out


def encrypt(model: str, summary: str, item_id: str = "") -> str:
    return replies.encrypt(model, item_id, summary)


def foreign_reasoning(body: dict[str, Any]) -> str | None:
    """The id of a replayed reasoning item this model cannot read (made by another model, or edited), if any
    (reference §1.4, §1.8)."""
    for item in body.get("input") or []:
        if item.get("type") != "reasoning" or not item.get("encrypted_content"):
            continue
        made = replies.issuer(str(item["encrypted_content"]))
        if made is None or made.get("model") != body.get("model"):
            return str(item.get("id"))
    return None


ABSENT: Any = object()  # a reply without a `usage` key (compatible servers, reference §5)


def response_object(body: dict[str, Any], rid: str, status: str, output: list[dict[str, Any]],
                    usage: Any = ABSENT, incomplete: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": rid, "object": "response", "created_at": time.time(), "model": body.get("model", "scripted"),
        "status": status, "output": output, "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "tool_choice": "auto", "tools": body.get("tools") or [], "store": False,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
    }
    if usage is not ABSENT:
        out["usage"] = usage
    return out


def usage(prompt: int, cached: int, output: int, reasoning: int, variant: str = "full", written: int = 0) -> Any:
    """The reply's usage in one of the variants of scripted/strict/replies.py (ABSENT: no key)."""
    return ABSENT if variant == "absent" else replies.responses_usage(variant, prompt, cached, output, reasoning, written)


class _Events:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, type_: str, **fields: Any) -> None:
        self.items.append({"type": type_, "sequence_number": len(self.items), **fields})


def events(reply: ScriptedReply, body: dict[str, Any], use: Any, reasoning: str | None,
           timing: Timing | None = None, summarize: bool = True,
           encrypted: bool | None = None) -> list[dict[str, Any]]:
    """The whole event sequence of one streamed response (without the final one when it fails).
    `reasoning`: the reasoning item's summary text when the model reasons (None: no item);
    `summarize`: the request asked for summaries (reference §1.12), else the item's summary is [];
    `encrypted`: the item carries `encrypted_content` (default: when `include` asks for it, §1.3)."""
    rid = "resp_" + uuid.uuid4().hex[:16]
    ev = _Events()
    ev.add("response.created", response=response_object(body, rid, "in_progress", []))  # first (§3.1)
    output: list[dict[str, Any]] = []
    if reply.stream_error is not None:
        if reply.stream_error.get("event") == "failed":  # the response itself fails
            failed = response_object(body, rid, "failed", [], use)
            failed["error"] = {"code": reply.stream_error.get("code"), "message": reply.stream_error.get("message", "")}
            ev.add("response.failed", response=failed)
        else:
            error = replies.stream_error_event(reply.stream_error)
            ev.add("error", **{k: v for k, v in error.items() if k != "type"})
        return ev.items
    if reasoning is not None:
        if encrypted is None:
            encrypted = "reasoning.encrypted_content" in (body.get("include") or [])
        _reasoning(ev, output, body, reasoning if summarize else None, encrypted)
    timing = timing or Timing()
    if reply.content or reply.refusal:
        _message(ev, output, reply, timing.step(64))
    for n, call in enumerate(reply.tool_calls):
        cut = reply.finish_reason == "length" and n == len(reply.tool_calls) - 1
        _call(ev, output, call.id, call.name, json.dumps(call.arguments) if call.raw_arguments is None
              else call.raw_arguments, timing.step(128), "incomplete" if cut else "completed")
    if reply.no_terminal:
        return ev.items
    if reply.finish_reason in ("length", "content_filter"):  # reference §3.1: the two incomplete reasons
        reason = "max_output_tokens" if reply.finish_reason == "length" else "content_filter"
        ev.add("response.incomplete", response=response_object(body, rid, "incomplete", output, use,
                                                               incomplete=reason))
    else:
        ev.add("response.completed", response=response_object(body, rid, "completed", output, use))
    return ev.items


def _reasoning(ev: _Events, output: list[dict[str, Any]], body: dict[str, Any], summary: str | None,
               encrypted: bool) -> None:
    idx, iid = len(output), "rs_" + uuid.uuid4().hex[:16]
    ev.add("response.output_item.added", output_index=idx, item={"id": iid, "type": "reasoning", "summary": []})
    parts = []
    if summary is not None:
        for kind, fields in replies.summary_events(iid, idx, summary):
            ev.add(kind, **fields)
        parts = [{"type": "summary_text", "text": summary}]
    item: dict[str, Any] = {"id": iid, "type": "reasoning", "summary": parts}
    if encrypted:
        item["encrypted_content"] = encrypt(str(body.get("model")), summary or "", iid)
    ev.add("response.output_item.done", output_index=idx, item=item)
    output.append(item)


def _message(ev: _Events, output: list[dict[str, Any]], reply: ScriptedReply, step: int) -> None:
    idx, iid = len(output), "msg_" + uuid.uuid4().hex[:16]
    ev.add("response.output_item.added", output_index=idx,
           item={"id": iid, "type": "message", "role": "assistant", "status": "in_progress", "content": []})
    if reply.refusal:
        part: dict[str, Any] = {"type": "refusal", "refusal": reply.refusal}
        ev.add("response.content_part.added", item_id=iid, output_index=idx, content_index=0,
               part={"type": "refusal", "refusal": ""})
        ev.add("response.refusal.delta", item_id=iid, output_index=idx, content_index=0, delta=reply.refusal)
        ev.add("response.refusal.done", item_id=iid, output_index=idx, content_index=0, refusal=reply.refusal)
    else:
        text = reply.content
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        ev.add("response.content_part.added", item_id=iid, output_index=idx, content_index=0,
               part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})
        for i in range(0, len(text), step):
            ev.add("response.output_text.delta", item_id=iid, output_index=idx, content_index=0,
                   delta=text[i : i + step], logprobs=[])
        ev.add("response.output_text.done", item_id=iid, output_index=idx, content_index=0, text=text, logprobs=[])
    ev.add("response.content_part.done", item_id=iid, output_index=idx, content_index=0, part=part)
    status = "incomplete" if reply.finish_reason in ("length", "content_filter") and not reply.tool_calls \
        else "completed"
    item = {"id": iid, "type": "message", "role": "assistant", "status": status, "content": [part]}
    ev.add("response.output_item.done", output_index=idx, item=item)
    output.append(item)


def _call(ev: _Events, output: list[dict[str, Any]], call_id: str, name: str, args: str, step: int,
          status: str = "completed") -> None:
    idx, iid = len(output), "fc_" + uuid.uuid4().hex[:16]
    ev.add("response.output_item.added", output_index=idx, item={
        "id": iid, "type": "function_call", "call_id": call_id, "name": name, "arguments": "",
        "status": "in_progress"})
    for i in range(0, len(args), step):
        ev.add("response.function_call_arguments.delta", item_id=iid, output_index=idx, delta=args[i : i + step])
    ev.add("response.function_call_arguments.done", item_id=iid, output_index=idx, arguments=args, name=name)
    item = {"id": iid, "type": "function_call", "call_id": call_id, "name": name, "arguments": args,
            "status": status}
    ev.add("response.output_item.done", output_index=idx, item=item)
    output.append(item)


def sse(items: list[dict[str, Any]]) -> list[tuple[bytes, bool]]:
    """The chunks, each marked when it carries a token (paced when the model has a rate)."""
    return [(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode(), e["type"] in TOKEN_EVENTS) for e in items]
