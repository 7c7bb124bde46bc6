"""The strict double's request rules (scripted/strict/), each against the refusal the reference note
(`openai-api-rules.md`) gives: status, code, param, wording; and the groups' switch."""

from __future__ import annotations

from typing import Any

import pytest

from scripted.strict import OFF, Strictness
from scripted.strict.replies import encrypt
from scripted.strict.requests import check

ON = Strictness()
TOOL = {"type": "function", "name": "echo", "parameters": {"type": "object"}, "strict": False}
CHAT_TOOL = {"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}


def responses(*items: dict[str, Any], model: str = "gpt-5-mini", **extra: Any) -> dict[str, Any]:
    return {"model": model, "input": [{"role": "user", "content": "hi"}, *items], "stream": True, "store": False,
            "tools": [TOOL], **extra}


def chat(*messages: dict[str, Any], model: str = "gpt-5-mini", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
                                         *messages], "stream": True, "tools": [CHAT_TOOL], **extra}


def reasoning(model: str = "gpt-5-mini", rid: str = "rs_1", blob: str | None = None) -> dict[str, Any]:
    return {"type": "reasoning", "id": rid, "summary": [], "encrypted_content": blob or encrypt(model, rid)}


CALL = {"type": "function_call", "call_id": "c1", "name": "echo", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
ASSISTANT_CALL = {"role": "assistant", "content": None,
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}]}

CASES: list[tuple[str, str, dict[str, Any], tuple[int, str | None, str]]] = [
    ("replay ok", "responses", responses(reasoning(), CALL, OUTPUT), (0, None, "")),
    ("id-only under store:false", "responses", responses({"type": "reasoning", "id": "rs_1", "summary": []}, CALL,
                                                         OUTPUT), (404, None, "Items are not persisted")),
    ("foreign model", "responses", responses(reasoning("gpt-5"), CALL, OUTPUT),
     (400, "invalid_encrypted_content", "could not be verified")),
    ("tampered", "responses", responses(reasoning(blob=encrypt("gpt-5-mini", "rs_1")[:-2] + "00"), CALL, OUTPUT),
     (400, "invalid_encrypted_content", "could not be verified")),
    ("another item's blob", "responses", responses(reasoning(blob=encrypt("gpt-5-mini", "rs_2")), CALL, OUTPUT),
     (400, "invalid_encrypted_content", "could not be verified")),
    ("summary missing", "responses", responses({"type": "reasoning", "id": "rs_1"}, CALL, OUTPUT),
     (400, "missing_required_parameter", "'input[1].summary'")),
    ("reasoning alone", "responses", responses(reasoning()), (400, None, "without its required following item")),
    ("phase on user", "responses", responses({"role": "user", "content": "x", "phase": "commentary"}),
     (400, "unknown_parameter", "'input[1].phase'")),
    ("call without output", "responses", responses(CALL), (400, None, "No tool output found for function call c1")),
    ("output without call", "responses", responses(OUTPUT), (400, None, "No tool call found for function call output")),
    ("unknown model", "responses", responses(model="gpt-9"), (404, "model_not_found", "`gpt-9` does not exist")),
    ("reasoning_effort on responses", "responses", responses(reasoning_effort="low"),
     (400, "unsupported_parameter", "has moved to 'reasoning.effort'")),
    ("messages on responses", "responses", responses(messages=[]), (400, "unsupported_parameter", "moved to 'input'")),
    ("max_output_tokens 8", "responses", responses(max_output_tokens=8), (400, "integer_below_min_value", ">= 16")),
    ("temperature while reasoning", "responses", responses(temperature=0.2),
     (400, "unsupported_value", "Only the default (1)")),
    ("temperature at none", "responses", responses(model="gpt-5.1", temperature=0.2), (0, None, "")),
    ("5.6 cache fields on 5.4", "responses", responses(model="gpt-5.4", prompt_cache_options={"mode": "implicit"}),
     (400, "unknown_parameter", "prompt_cache_options")),
    ("context window", "responses", responses({"role": "user", "content": "x" * 1_200_000}),
     (400, "context_length_exceeded", "exceeds the context window")),
    ("image on o3-mini", "responses", responses({"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "auto"}]}, model="o3-mini"),
     (400, None, "only supported by certain models")),
    ("sdk: include outside the enum", "responses", responses(include=["reasoning.everything"]),
     (400, "invalid_value", "'include[0]'")),
    ("sdk: unknown key", "responses", responses(temperatur=1), (400, "unknown_parameter", "'temperatur'")),
    ("chat ok", "chat", chat(ASSISTANT_CALL, {"role": "tool", "tool_call_id": "c1", "content": "ok"}), (0, None, "")),
    ("chat call unanswered", "chat", chat(ASSISTANT_CALL, {"role": "user", "content": "next"}),
     (400, None, "did not have response messages: c1")),
    ("chat orphan tool", "chat", chat({"role": "tool", "tool_call_id": "c9", "content": "ok"}),
     (400, None, "must be a response to a preceeding message")),
    ("chat o1-mini system role", "chat", {"model": "o1-mini", "messages": [{"role": "system", "content": "s"}],
                                          "stream": True}, (400, "unsupported_value", "does not support 'system'")),
    ("chat max_tokens on gpt-5", "chat", chat(max_tokens=100), (400, "unsupported_parameter", "max_completion_tokens")),
    ("chat max_completion_tokens cap", "chat", chat(model="gpt-4o", max_completion_tokens=20_000),
     (400, "invalid_value", "at most 16384 completion tokens")),
    ("chat reasoning_effort null", "chat", chat(model="gpt-5.1", reasoning_effort=None),
     (400, "invalid_type", "does not support null")),
    ("chat parallel_tool_calls null", "chat", chat(model="gpt-4o", parallel_tool_calls=None),
     (400, "invalid_type", "got null")),
    ("chat unknown argument", "chat", chat(input="x"), (400, None, "Unrecognized request argument supplied: input")),
    ("chat context window", "chat", chat({"role": "user", "content": "x" * 600_000}, model="gpt-4o"),
     (400, "context_length_exceeded", "maximum context length is 128000 tokens")),
]


@pytest.mark.parametrize(("api", "body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_rule_refuses_as_the_api_does(api: str, body: dict[str, Any], expected: tuple[int, str | None, str]) -> None:
    status, code, words = expected
    err = check(api, body, ON)
    if status == 0:
        assert err is None, err and err.message
        return
    assert err is not None and err.status == status and err.code == code, err
    assert words in err.message
    assert check(api, body, OFF) is None or err.code == "invalid_encrypted_content"  # off: the lenient double


def test_groups_switch_one_by_one() -> None:
    body = responses(CALL)  # a call without its output: the pairing group only
    assert check("responses", body, Strictness.parse("-pairing")) is None
    assert check("responses", body, Strictness.parse("pairing")) is not None
    assert Strictness.parse("off").groups == frozenset()
    with pytest.raises(ValueError, match="unknown groups"):
        Strictness.parse("reasoning,nonsense")
