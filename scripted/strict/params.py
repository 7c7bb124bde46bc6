"""Per-model parameter support (reference §2.1/§2.2): efforts, sampling, output caps, Chat-only and
5.6-only fields, explicit nulls, and the other API's parameter shapes."""

from __future__ import annotations

from typing import Any

from scripted.strict.rules import Family, effort
from scripted.types import ScriptedError

# The other API's parameters (reference §2.1: OpenHands/software-agent-sdk#755, goose#2564).
MOVED = {"reasoning_effort": "reasoning.effort", "messages": "input"}
RESPONSES_ONLY = ("input", "instructions", "reasoning", "max_output_tokens", "include", "previous_response_id")


def _unsupported(name: str, extra: str = "") -> ScriptedError:
    return ScriptedError(400, "unsupported_parameter",
                         f"Unsupported parameter: '{name}' is not supported with this model.{extra}", param=name)


def wrong_api(api: str, body: dict[str, Any]) -> ScriptedError | None:
    if api == "responses":
        for name, moved in MOVED.items():
            if name in body:
                return ScriptedError(400, "unsupported_parameter",
                                     f"Unsupported parameter: '{name}'. In the Responses API, this parameter has moved "
                                     f"to '{moved}'. Try again with the new parameter.", param=name)
        return None
    for name in RESPONSES_ONLY:
        if name in body:  # reference §7.1/7.2: "Unrecognized request argument supplied: X"
            return ScriptedError(400, None, f"Unrecognized request argument supplied: {name}", param=name)
    return None


def _effort_param(api: str) -> str:
    return "reasoning.effort" if api == "responses" else "reasoning_effort"


def _sent_effort(api: str, body: dict[str, Any]) -> tuple[bool, Any]:
    if api == "responses":
        reasoning = body.get("reasoning")
        return (isinstance(reasoning, dict) and "effort" in reasoning,
                reasoning.get("effort") if isinstance(reasoning, dict) else None)
    return "reasoning_effort" in body, body.get("reasoning_effort")


def _efforts(api: str, body: dict[str, Any], fam: Family) -> ScriptedError | None:
    sent, value = _sent_effort(api, body)
    name = _effort_param(api)
    if sent and value is None and api == "chat":  # reference §2.1: livekit/agents PR #3966
        return ScriptedError(400, "invalid_type", f"'{name}' does not support null.", param=name)
    if not sent or value is None:
        return None
    if fam.efforts is None:  # reference §2.1: baml PR #2708, any-llm#270
        return _unsupported(name)
    if value not in fam.efforts:  # reference §2.1 table (vscode#300649 / cherry-studio#11864 list the values)
        allowed = [f"'{e}'" for e in fam.efforts]
        listed = allowed[0] if len(allowed) == 1 else ", ".join(allowed[:-1]) + ", and " + allowed[-1]
        return ScriptedError(400, "unsupported_value", f"Unsupported value: '{name}' does not support '{value}' with "
                             f"this model. Supported values are: {listed}.", param=name)
    return None


def _chat(body: dict[str, Any], fam: Family, model: str) -> ScriptedError | None:
    if "parallel_tool_calls" in body and not fam.parallel_on_chat:  # §2.2: langchain#29704 (even false)
        return _unsupported("parallel_tool_calls")
    if "max_tokens" in body and not fam.max_tokens_on_chat:  # §2.2 "max output (Chat)": ai_automation_suggester#38
        return _unsupported("max_tokens", " Use 'max_completion_tokens' instead.")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if isinstance(value, int) and value > fam.max_output:  # §2.2: catwalk#41
            return ScriptedError(400, "invalid_value", f"max_tokens is too large: {value}. This model supports at "
                                 f"most {fam.max_output} completion tokens, whereas you provided {value}.", param=name)
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
    if tools and fam.chat_tools_need_no_effort:
        sent, value = _sent_effort("chat", body)
        effective = value if sent and value is not None else (fam.default if fam.chat_tools_default_counts else None)
        if effective not in (None, "none"):
            # reference §2.1: pipecat#4043, openai-openapi#541, LibreChat#14355 (5.6: the default counts)
            return ScriptedError(400, "unsupported_parameter", f"Function tools with reasoning_effort are not "
                                 f"supported for {model} in /v1/chat/completions. Please use /v1/responses instead.",
                                 param="reasoning_effort")
    return None


def _responses(body: dict[str, Any], fam: Family) -> ScriptedError | None:
    value = body.get("max_output_tokens")
    if isinstance(value, int) and value < 16:  # §2.2 "max output (Responses)": hindsight#58
        return ScriptedError(400, "integer_below_min_value", "Invalid 'max_output_tokens': integer below minimum "
                             f"value. Expected a value >= 16, but got {value} instead.", param="max_output_tokens")
    if isinstance(value, int) and value > fam.max_output:  # §2.2 [R]: unconfirmed on Responses; the Chat rule's cap
        return ScriptedError(400, "invalid_value", f"max_output_tokens is too large: {value}. This model supports at "
                             f"most {fam.max_output} output tokens, whereas you provided {value}.",
                             param="max_output_tokens")
    return None


def check(api: str, body: dict[str, Any], fam: Family) -> ScriptedError | None:
    if (err := _efforts(api, body, fam)) is not None:
        return err
    if "parallel_tool_calls" in body and body["parallel_tool_calls"] is None:  # §2.1: langchainrb PR #921
        return ScriptedError(400, "invalid_type", "Invalid type for 'parallel_tool_calls': expected a boolean, but "
                             "got null instead.", param="parallel_tool_calls")
    err = _chat(body, fam, str(body.get("model"))) if api == "chat" else _responses(body, fam)
    if err is not None:
        return err
    reasoning_now = effort(api, body, fam) not in ("none",) and (fam.reasons or fam.efforts is None)
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None and value != 1 and fam.sampling_needs_no_effort and reasoning_now:
            # §2.2 temperature/top_p: OpenHands#4131, qwen-code#921, llmcomp#69
            return ScriptedError(400, "unsupported_value", f"Unsupported value: '{name}' does not support {value} "
                                 "with this model. Only the default (1) value is supported.", param=name)
    if body.get("stop") and not fam.stop:  # §2.2 `stop`: SDK completion_create_params.py
        return _unsupported("stop")
    if "prompt_cache_options" in body and not fam.cache_fields:  # §2.2 / §6: codex skill doc, Azure doc
        return ScriptedError(400, "unknown_parameter", "Unknown parameter: 'prompt_cache_options'.",
                             param="prompt_cache_options")
    return None
