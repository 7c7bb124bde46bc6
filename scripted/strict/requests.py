"""A request checked against the real API's rules (rules.py's table), once per request: the first
refusal, in the real API's shape and wording, or None. Groups switch with GAMMA_SCRIPTED_STRICT."""

from __future__ import annotations

from typing import Any

from scripted.responses import foreign_reasoning
from scripted.strict import Strictness, items, params, sdk_types
from scripted.strict.rules import Family, family
from scripted.types import ScriptedError


def check(api: str, body: dict[str, Any], strict: Strictness) -> ScriptedError | None:
    if not strict.on("reasoning") and api == "responses" and (foreign := foreign_reasoning(body)) is not None:
        # reference §1.4/§1.8: the lenient double still binds encrypted reasoning to its issuer
        return ScriptedError(400, "invalid_encrypted_content",
                             f"The encrypted content for item {foreign} could not be verified.")
    if not strict.groups:
        return None
    model = str(body.get("model", ""))
    fam = family(model)
    if strict.on("models") and (err := _model(api, model, fam)) is not None:
        return err
    if strict.on("params") and (err := params.wrong_api(api, body)) is not None:
        return err
    if fam is None:
        fam = UNKNOWN  # the lenient `models` group off: an unknown model is a generic modern one
    if strict.on("params") and (err := params.check(api, body, fam)) is not None:
        return err
    walk = items.Walk(len(str(body.get("instructions") or "")))
    walker = items.responses_items if api == "responses" else items.chat_messages
    if (err := walker(body, fam, strict, walk)) is not None:
        return err
    # the SDK's types last: the rules above give the API's own wording for what they know
    if strict.on("sdk") and (err := sdk_types.check(api, body)) is not None:
        return err
    if strict.on("context"):
        return _context(api, walk.chars // 4, fam)
    return None


UNKNOWN = Family(frozenset({"chat", "responses"}), ("none", "minimal", "low", "medium", "high", "xhigh", "max"),
                 None, 1_050_000, 128_000)


def _model(api: str, model: str, fam: Family | None) -> ScriptedError | None:
    if fam is None:  # reference §4.1 (404, param "model"); the plan's wording of model_not_found
        return ScriptedError(404, "model_not_found",
                             f"The model `{model}` does not exist or you do not have access to it.")
    if api not in fam.apis:
        if api == "chat" and "codex" in model:  # reference §2.1: tmuxai#82, vscode-openai#358
            message = "This model is only supported in v1/responses and not in v1/chat/completions."
        elif api == "chat":  # reference §2.1: goose#2564 (o3-pro), chatwise-releases#1256
            message = ("This is not a chat model and thus not supported in the v1/chat/completions endpoint. "
                       "Did you mean to use v1/completions?")
        else:  # reference §2.1 table "Endpoints": o1-mini / o1-preview are served on Chat only
            message = "This model is not supported in v1/responses."
        return ScriptedError(404, None, message, param="model")
    return None


def _context(api: str, tokens: int, fam: Family) -> ScriptedError | None:
    """reference §2.3 (windows; gpt-5's 272k input) and §4.1 (the messages, per API)."""
    limit = fam.input_limit or fam.context
    if tokens <= limit:
        return None
    if api == "responses":  # codex responses.rs test context_window_error_is_fatal
        return ScriptedError(400, "context_length_exceeded", "Your input exceeds the context window of this model. "
                             "Please adjust your input and try again.", param="input")
    # ChatGPTNextWeb/NextChat#3195
    return ScriptedError(400, "context_length_exceeded",
                         f"This model's maximum context length is {fam.context} tokens. However, your messages "
                         f"resulted in {tokens} tokens. Please reduce the length of the messages.", param="messages")
