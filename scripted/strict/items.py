"""The conversation a request carries, checked item by item (one walk, once per request): reasoning
replay, `phase`, roles, images, 5.6-only cache breakpoints, tool calls paired with their outputs, and the
characters the model reads (for the context window). Each rule cites the reference note
(`openai-api-rules.md`) or, where the note is silent, the public reports of the real API's message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scripted.strict import Strictness, replies
from scripted.strict.rules import Family
from scripted.types import ScriptedError

RESPONSES_ROLES = ("user", "assistant", "system", "developer")
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# What may follow a reasoning item: the item it produced (reference §1.6).
FOLLOWERS = ("function_call", "custom_tool_call", "computer_call", "web_search_call", "file_search_call",
             "code_interpreter_call", "local_shell_call", "mcp_call", "image_generation_call")
IMAGE_PARTS = ("input_image", "image_url")


def bad(message: str, param: str | None = None, code: str | None = None, status: int = 400) -> ScriptedError:
    return ScriptedError(status, code, message, param=param)


@dataclass
class Walk:
    """What one walk over the conversation found: the characters the model reads (images aside)."""

    chars: int = 0


def _part_checks(parts: Any, where: str, fam: Family, strict: Strictness, walk: Walk) -> ScriptedError | None:
    if isinstance(parts, str):
        walk.chars += len(parts)
        return None
    for j, part in enumerate(parts if isinstance(parts, list) else []):
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in IMAGE_PARTS:
            if strict.on("params") and not fam.images:
                # reference §2.2 "images": browser-use/web-ui#274, lm-council#14
                return bad(f"Invalid content type. {kind} is only supported by certain models.",
                           f"{where}.content.[{j}].type" if where.startswith("messages")
                           else f"{where}.content[{j}].type")
            walk.chars += 1000  # an image costs tokens by its tiles, not by its base64 text
        else:
            walk.chars += len(str(part.get("text") or part.get("refusal") or ""))
        if "prompt_cache_breakpoint" in part and strict.on("params") and not fam.cache_fields:
            # reference §2.2 / §6: breakpoints exist from gpt-5.6 on; older models return 400
            return bad(f"Unknown parameter: '{where}.content[{j}].prompt_cache_breakpoint'.",
                       f"{where}.content[{j}].prompt_cache_breakpoint", "unknown_parameter")
    return None


def _reasoning(items: list[dict[str, Any]], i: int, body: dict[str, Any]) -> ScriptedError | None:
    item, where = items[i], f"input[{i}]"
    for key in ("id", "summary"):
        if key not in item:  # reference §1.5: community.openai.com/t/1364760
            return bad(f"Missing required parameter: '{where}.{key}'.", f"{where}.{key}", "missing_required_parameter")
    rid = str(item.get("id"))
    blob = item.get("encrypted_content")
    if not blob:
        if body.get("store") is False:  # reference §1.1: agents#919, PR #1756, pi#5059
            return bad(f"Item with id '{rid}' not found. Items are not persisted when `store` is set to false. Try "
                       "again with `store` set to true, or remove this item from your input.", "input", status=404)
    else:
        made = replies.issuer(str(blob))
        if made is None or made.get("model") != body.get("model") or made.get("id") not in (rid, ""):
            # reference §1.4 (a blob other than the one issued) and §1.8 (bound to its issuer): codex#17541
            return bad(f"The encrypted content {str(blob)[:12]}… could not be verified. Reason: Encrypted content "
                       "could not be decrypted or parsed.", None, "invalid_encrypted_content")
    follower = items[i + 1] if i + 1 < len(items) else None
    kind = (follower or {}).get("type", "message")
    if follower is None or not (kind in FOLLOWERS or (kind == "message" and follower.get("role") == "assistant")):
        # reference §1.6: continuedev/continue#8933, #12620
        return bad(f"Item '{rid}' of type 'reasoning' was provided without its required following item.", "input")
    return None


def responses_items(body: dict[str, Any], fam: Family, strict: Strictness, walk: Walk) -> ScriptedError | None:
    items = body.get("input")
    if isinstance(items, str):
        walk.chars += len(items)
        return None
    items = [x for x in items or [] if isinstance(x, dict)]
    calls: dict[str, int] = {}
    outputs: set[str] = set()
    for i, item in enumerate(items):
        kind, where = item.get("type", "message"), f"input[{i}]"
        if kind == "message":
            role = item.get("role")
            if strict.on("roles") and role not in RESPONSES_ROLES:
                return bad(f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and "
                           "'user'.", f"{where}.role", "invalid_value")
            if strict.on("reasoning") and "phase" in item and role != "assistant":
                # reference §1.11: `phase` belongs to assistant messages ("Not used for user messages")
                return bad(f"Unknown parameter: '{where}.phase'.", f"{where}.phase", "unknown_parameter")
            if (err := _part_checks(item.get("content"), where, fam, strict, walk)) is not None:
                return err
        elif kind == "reasoning":
            if strict.on("reasoning") and (err := _reasoning(items, i, body)) is not None:
                return err
        elif kind == "function_call":
            calls[str(item.get("call_id"))] = i
            walk.chars += len(str(item.get("arguments") or ""))
        elif kind == "function_call_output":
            cid = str(item.get("call_id"))
            if strict.on("pairing") and cid not in calls:
                # the API's 400 (param "input"): continuedev/continue#10092, microsoft/vscode#320060
                return bad(f"No tool call found for function call output with call_id {cid}.", "input")
            outputs.add(cid)
            walk.chars += len(str(item.get("output") or ""))
    missing = [c for c in calls if c not in outputs]
    if strict.on("pairing") and missing:
        # the API's 400 (param "input"): router-for-me/CLIProxyAPI#2368, openai/codex#620
        return bad(f"No tool output found for function call {missing[0]}.", "input")
    return None


def chat_messages(body: dict[str, Any], fam: Family, strict: Strictness, walk: Walk) -> ScriptedError | None:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    pending: list[str] = []  # tool_call ids of the last assistant message still without their tool message
    for i, m in enumerate(messages):
        role, where = m.get("role"), f"messages[{i}]"
        if strict.on("roles"):
            if role not in CHAT_ROLES:
                return bad(f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
                           "'function', 'tool', and 'developer'.", f"{where}.role", "invalid_value")
            if role in ("system", "developer") and not fam.system_roles:
                # reference §2.2 "developer / system role": lobehub#5704, agent-framework#1077
                return bad(f"Unsupported value: '{where}.role' does not support '{role}' with this model.",
                           f"{where}.role", "unsupported_value")
        if strict.on("pairing"):
            if role == "tool":
                if str(m.get("tool_call_id")) not in pending:
                    # the API's 400 on an orphan tool message (as quoted in QwenLM/qwen-code#315's neighbours)
                    return bad("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                               "message with 'tool_calls'.", f"messages.[{i}].role")
                pending.remove(str(m.get("tool_call_id")))
            elif pending:
                return _unanswered(pending, i)
            if role == "assistant":
                pending = [str(c.get("id")) for c in m.get("tool_calls") or [] if isinstance(c, dict)]
        if (err := _part_checks(m.get("content"), f"messages.[{i}]", fam, strict, walk)) is not None:
            return err
        for c in m.get("tool_calls") or []:
            walk.chars += len(str((c.get("function") or {}).get("arguments") or "")) if isinstance(c, dict) else 0
    return _unanswered(pending, len(messages)) if strict.on("pairing") and pending else None


def _unanswered(pending: list[str], at: int) -> ScriptedError:
    # the API's 400 for a tool call without its tool message (QwenLM/qwen-code#315 quotes it)
    return bad("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
               f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
               f"messages.[{at}].role")
