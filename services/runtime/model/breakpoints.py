"""Explicit prompt-cache breakpoints for the models of the `breakpoints` cache regime (GPT-5.6 and
later; docs/cache.md, reference openai-api-rules.md §6).

From GPT-5.6 on, a new conversation hits a shared prefix only if some earlier request wrote an
explicit breakpoint exactly at its end; the one implicit breakpoint sits near the latest user or
tool message and serves only the conversation that wrote it. So the system prompt goes out as
content blocks: the static prefix every session shares (its end is the first breakpoint: tools
render before it, so they are inside), then the variant's preloaded skill bodies (the second). The
conversation keeps the implicit breakpoint (`mode` left at its default, `implicit`): a request
writes it plus at most 3 explicit ones, and this sends 2. Blocks are sliced from the one prompt
string, so each is byte-identical across the sessions of a variant, and the static block across
variants. Models of the `prefix` regime never see any of this: their bodies are today's
(tests/unit/test_request_golden.py).
"""

from __future__ import annotations

from typing import Any

from openai.types.chat.chat_completion_content_part_text_param import ChatCompletionContentPartTextParam
from openai.types.responses.response_create_params import PromptCacheOptions
from openai.types.responses.response_input_text_param import PromptCacheBreakpoint, ResponseInputTextParam

from services.runtime.engine.types import AgentContext
from services.runtime.model.model_api import ModelSettings

MAX_EXPLICIT = 3  # with the implicit one, the 4 breakpoints a request may write (SDK PromptCacheOptions)
# `ttl` is a minimum lifetime; 30m is the default and the only value (SDK PromptCacheOptions.ttl). Never
# `prompt_cache_retention` on these models: deprecated, and it does not interact (reference §6).
CACHE_OPTIONS: PromptCacheOptions = {"ttl": "30m"}


def uses_breakpoints(settings: ModelSettings) -> bool:
    return settings.caps.cache_regime == "breakpoints"


def prompt_blocks(context: AgentContext) -> list[str]:
    """The system prompt cut where a shared prefix ends: the static prefix, then the variant's part
    (none for the base variant, or for a prompt that does not start with the static prefix)."""
    system, static = context.system_prompt, context.static_prefix
    if static and len(system) > len(static) and system.startswith(static):
        return [static, system[len(static):]][-MAX_EXPLICIT:]
    return [system]


def _marker() -> PromptCacheBreakpoint:
    return {"mode": "explicit"}


def responses_blocks(context: AgentContext) -> list[ResponseInputTextParam]:
    return [{"type": "input_text", "text": b, "prompt_cache_breakpoint": _marker()} for b in prompt_blocks(context)]


def chat_blocks(context: AgentContext) -> list[ChatCompletionContentPartTextParam]:
    return [{"type": "text", "text": b, "prompt_cache_breakpoint": _marker()} for b in prompt_blocks(context)]


def responses_system_item(context: AgentContext, settings: ModelSettings) -> dict[str, Any]:
    """The system prompt as the first input item (Responses' `instructions` is a string, where no
    breakpoint can go): a developer message, ahead of everything the conversation holds."""
    role = "developer" if settings.caps.developer_role else "user"
    return {"type": "message", "role": role, "content": responses_blocks(context)}

