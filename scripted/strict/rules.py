"""The double's per-family rule table: what each model accepts, as the reference note states it
(`/work/shared/reference/openai-api-rules.md`, cited per row as §section + its source). The double's own
table, independent of the harness's model catalogue on purpose: the double is the oracle the harness is
tested against, so a mistake copied into both would never show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

BOTH = frozenset({"chat", "responses"})
RESPONSES = frozenset({"responses"})
CHAT = frozenset({"chat"})
# The SDK's ReasoningEffort enum (reference §2.1, `openai/types/shared/reasoning_effort.py`).
GPT5 = ("minimal", "low", "medium", "high")
GPT51 = ("none", "low", "medium", "high")
GPT52 = ("none", "low", "medium", "high", "xhigh")
GPT56 = ("none", "low", "medium", "high", "xhigh", "max")
LMH = ("low", "medium", "high")
CODEX_MAX = ("low", "medium", "high", "xhigh")


@dataclass(frozen=True)
class Family:
    apis: frozenset[str]
    efforts: tuple[str, ...] | None  # None: no effort parameter at all (§2.1 "gpt-4o … any value → 400")
    default: str | None  # the effort the model reasons at when none is sent (§1.2, §2.1); None: never reasons
    context: int
    max_output: int
    input_limit: int = 0  # input tokens alone (gpt-5: 272k of the 400k window, §2.3); 0 = the context
    images: bool = True  # §2.2 "images"
    system_roles: bool = True  # §2.2 "developer / system role": o1-mini / o1-preview reject both
    parallel_on_chat: bool = True  # §2.2 `parallel_tool_calls` (Chat): o-series reject it, even false
    max_tokens_on_chat: bool = True  # §2.2 "max output (Chat)": `max_tokens` not compatible with o-series
    stop: bool = True  # §2.2 `stop`: not supported by o3 / o4-mini
    chat_tools_need_no_effort: bool = False  # §2.1: gpt-5.4+ Chat + function tools + effort ≠ none → 400
    chat_tools_default_counts: bool = False  # §2.1: on gpt-5.6 the default effort counts (nothing sent)
    cache_fields: bool = False  # §2.2 `prompt_cache_options`/`prompt_cache_breakpoint`: gpt-5.6+ only
    sampling_needs_no_effort: bool = False  # §2.2 temperature/top_p: default only while reasoning

    @property
    def reasons(self) -> bool:
        return self.default is not None


_GPT4O = Family(BOTH, None, None, 128_000, 16_384)  # §2.1 baml#2708; §2.3 gpt-4o model page
_GPT41 = Family(BOTH, None, None, 1_047_576, 32_768)  # §2.3 Vercel catalogue [R]
_O1MINI = Family(CHAT, None, None, 128_000, 65_536, images=False, system_roles=False, parallel_on_chat=False,
                 max_tokens_on_chat=False, sampling_needs_no_effort=True)  # §2.1 inspect_ai#1291; §2.2 lobehub#5704
_O_SERIES = Family(BOTH, LMH, "medium", 200_000, 100_000, parallel_on_chat=False, max_tokens_on_chat=False,
                   sampling_needs_no_effort=True)  # §2.1 litellm#8182; §2.2 langchain#29704; §2.3 Roo-Code#2691 [R]
_O_PRO = Family(RESPONSES, LMH, "medium", 200_000, 100_000, parallel_on_chat=False, max_tokens_on_chat=False,
                sampling_needs_no_effort=True)  # §2.1 goose#2564 (Responses only); efforts not in the note: o-series'
_GPT5 = Family(BOTH, GPT5, "medium", 400_000, 128_000, input_limit=272_000, max_tokens_on_chat=False,
               sampling_needs_no_effort=True)  # §2.1 openai-ruby reasoning_effort.rb; §2.3 gpt-5-mini page
_GPT5_CHAT = Family(BOTH, None, None, 128_000, 16_384)  # §2.1 one-api#120; §2.3 [R]
_GPT51_CHAT = Family(BOTH, ("medium",), "medium", 128_000, 16_384, max_tokens_on_chat=False)  # §2.1 one-api#266
_GPT5_PRO = Family(RESPONSES, ("high",), "high", 400_000, 272_000, max_tokens_on_chat=False)  # §2.1 SDK docstring
_CODEX = Family(RESPONSES, LMH, "medium", 400_000, 128_000, input_limit=272_000)  # §2.1 codex model_presets.rs
_CODEX_MINI = Family(RESPONSES, ("medium", "high"), "medium", 400_000, 128_000, input_limit=272_000)  # §2.1 same
_CODEX_MAX = Family(RESPONSES, CODEX_MAX, "medium", 400_000, 128_000, input_limit=272_000)  # §2.1 models.json
_GPT51 = Family(BOTH, GPT51, "none", 400_000, 128_000, input_limit=272_000, max_tokens_on_chat=False,
                sampling_needs_no_effort=True)  # §2.1 openai-ruby; agents#2089; opencode#4451
_GPT52 = Family(BOTH, GPT52, "none", 400_000, 128_000, input_limit=272_000, max_tokens_on_chat=False,
                sampling_needs_no_effort=True)  # §2.1 cherry-studio#11864
_GPT52_PRO = Family(RESPONSES, ("medium", "high", "xhigh"), "medium", 400_000, 128_000)  # §2.1 catalogue [R]
_GPT54 = Family(BOTH, GPT52, "none", 1_050_000, 128_000, max_tokens_on_chat=False, chat_tools_need_no_effort=True,
                sampling_needs_no_effort=True)  # §2.1 codex skill doc [R]; pipecat#4043; §2.3 oxen [R]
_GPT55 = Family(BOTH, GPT52, "medium", 1_050_000, 128_000, max_tokens_on_chat=False,
                chat_tools_need_no_effort=True, sampling_needs_no_effort=True)  # §2.1 codex skill doc [R]
_GPT56 = Family(BOTH, GPT56, "medium", 1_050_000, 128_000, max_tokens_on_chat=False, chat_tools_need_no_effort=True,
                chat_tools_default_counts=True, cache_fields=True,
                sampling_needs_no_effort=True)  # §2.1 codex skill doc [R], LibreChat#14355; §2.3; §6
_PRO_56 = Family(RESPONSES, ("medium", "high", "xhigh", "max"), "medium", 1_050_000, 128_000, cache_fields=True)
_TEXT_ONLY = Family(BOTH, None, None, 16_385, 4_096, images=False)  # §2.2 images: gpt-3.5 / gpt-4 text-only

# Exact names; a dated snapshot (`-2025-08-07`) reads as its family (§2.1: snapshots share capabilities).
FAMILIES: dict[str, Family] = {
    "gpt-4o": _GPT4O, "gpt-4o-mini": _GPT4O, "chatgpt-4o-latest": _GPT4O,
    "gpt-4.1": _GPT41, "gpt-4.1-mini": _GPT41, "gpt-4.1-nano": _GPT41,
    "gpt-3.5-turbo": _TEXT_ONLY, "gpt-4": Family(BOTH, None, None, 8_192, 8_192, images=False),
    "o1-mini": _O1MINI, "o1-preview": _O1MINI,
    "o1": _O_SERIES, "o3": Family(BOTH, LMH, "medium", 200_000, 100_000, parallel_on_chat=False,
                                  max_tokens_on_chat=False, stop=False, sampling_needs_no_effort=True),
    "o4-mini": Family(BOTH, LMH, "medium", 200_000, 100_000, parallel_on_chat=False, max_tokens_on_chat=False,
                      stop=False, sampling_needs_no_effort=True),
    "o3-mini": Family(BOTH, LMH, "medium", 200_000, 100_000, images=False, parallel_on_chat=False,
                      max_tokens_on_chat=False, sampling_needs_no_effort=True),
    "o1-pro": _O_PRO, "o3-pro": _O_PRO, "o3-deep-research": _O_PRO, "o4-mini-deep-research": _O_PRO,
    "computer-use-preview": Family(RESPONSES, None, None, 8_192, 1_024),
    "gpt-5": _GPT5, "gpt-5-mini": _GPT5, "gpt-5-nano": _GPT5,
    "gpt-5-chat-latest": _GPT5_CHAT, "gpt-5.1-chat-latest": _GPT51_CHAT, "gpt-5.2-chat-latest": _GPT51_CHAT,
    "gpt-5-pro": _GPT5_PRO,
    "gpt-5-codex": _CODEX, "gpt-5.1-codex": _CODEX, "codex-mini-latest": _CODEX_MINI,
    "gpt-5-codex-mini": _CODEX_MINI, "gpt-5.1-codex-mini": _CODEX_MINI,
    "gpt-5.1-codex-max": _CODEX_MAX, "gpt-5.2-codex": _CODEX_MAX, "gpt-5.3-codex": _CODEX_MAX,
    "gpt-5.1": _GPT51, "gpt-5.2": _GPT52, "gpt-5.2-pro": _GPT52_PRO,
    "gpt-5.4": _GPT54, "gpt-5.4-mini": _GPT54, "gpt-5.4-nano": _GPT54, "gpt-5.4-pro": _GPT52_PRO,
    "gpt-5.5": _GPT55, "gpt-5.5-pro": _GPT52_PRO,
    "gpt-5.6-sol": _GPT56, "gpt-5.6-terra": _GPT56,
    "gpt-5.6-luna": Family(BOTH, GPT56, "medium", 400_000, 128_000, max_tokens_on_chat=False,
                           chat_tools_need_no_effort=True, chat_tools_default_counts=True, cache_fields=True,
                           sampling_needs_no_effort=True),
    "gpt-5.6-sol-pro": _PRO_56,
}
SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")


@lru_cache(maxsize=256)
def family(model: str) -> Family | None:
    """The model's family, or None: an unknown model (404 model_not_found, reference §2.1/§4.1)."""
    return FAMILIES.get(model) or FAMILIES.get(SNAPSHOT.sub("", model))


def effort(api: str, body: dict[str, Any], fam: Family | None) -> str | None:
    """The effort the model actually reasons at: the one sent, else the family's default (§1.2)."""
    if api == "responses":
        reasoning = body.get("reasoning")
        sent = reasoning.get("effort") if isinstance(reasoning, dict) else None
    else:
        sent = body.get("reasoning_effort")
    if isinstance(sent, str):
        return sent
    return fam.default if fam is not None else None
