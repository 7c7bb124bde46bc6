"""The compaction check before a model call bounds the context by its UTF-8 bytes first: a context far
under the window is never tokenized, one near it is counted and compacts past the threshold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from services.runtime.runs.compactor import Compactor
from shared.contracts.records.messages import (
    AgentMessage,
    AssistantMessage,
    TextContent,
    ToolCall,
    UserMessage,
)
from shared.history.tokens import TextTokens, context_tokens, context_tokens_bound, text_bytes
from tests.unit.test_runtime_session import build


class Counting(TextTokens):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        return super().__call__(text)


def compactor(tmp_path: Path, messages: list[AgentMessage]) -> tuple[Compactor, Counting, list[Any]]:
    c = build(tmp_path).compactor
    c.context_window, c.reserve_tokens = 8_000, 1_000
    c.counts = counting = Counting()
    c.context.messages = messages
    asked: list[Any] = []

    async def request(instructions: str | None, tokens: int | None = None, manual: bool = False) -> str | None:
        asked.append(tokens)
        return "r1"

    c.request = request  # type: ignore[method-assign]
    return c, counting, asked


async def test_a_context_far_under_the_window_is_never_tokenized(tmp_path: Path) -> None:
    c, counting, asked = compactor(tmp_path, [UserMessage(content="hello " * 200),
                                              AssistantMessage(content=[TextContent(text="héllo wörld " * 100)])])
    await c.before_model_call(c.context)
    assert counting.calls == 0 and asked == []


async def test_a_context_near_the_window_is_counted_and_still_compacts(tmp_path: Path) -> None:
    c, counting, asked = compactor(tmp_path, [UserMessage(content="word " * 7_500)])
    await c.before_model_call(c.context)
    assert counting.calls > 0
    assert asked == [c.request_tokens(c.context)] and asked[0] > 8_000 - 1_000


async def test_a_context_near_the_window_but_under_it_by_tokens_is_counted_not_compacted(tmp_path: Path) -> None:
    c, counting, asked = compactor(tmp_path, [UserMessage(content="word " * 2_000)])  # 10 KB, ~2k tokens
    assert c.request_tokens_bound(c.context) > 7_000 >= c.request_tokens(c.context)
    await c.before_model_call(c.context)
    assert counting.calls > 0 and asked == []


texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)


@given(st.lists(texts, max_size=6), st.dictionaries(st.text(max_size=5), texts, max_size=3))
def test_the_bytes_bound_is_never_under_the_count(parts: list[str], args: dict[str, str]) -> None:
    messages: list[AgentMessage] = [UserMessage(content=p) for p in parts]
    messages.append(AssistantMessage(content=[TextContent(text="".join(parts)),
                                              ToolCall(id="c1", name="read", arguments=args)]))
    assert context_tokens(messages) <= context_tokens_bound(messages)
    assert all(text_bytes(p) == len(p.encode()) for p in parts)


async def test_the_static_prefix_is_counted_once_for_the_same_tools_in_a_new_list(tmp_path: Path, monkeypatch: Any) -> None:
    """The tool policy hands a new list of the same tools before every model call: the system prompt
    and the schemas are tokenized once, and again only when the tools change."""
    from services.runtime.runs import compactor as module

    c, _, _ = compactor(tmp_path, [UserMessage(content="hello")])
    module._static_count.cache_clear()
    counted: list[str] = []
    real = module.count_text_tokens
    monkeypatch.setattr(module, "count_text_tokens", lambda text: counted.append(text) or real(text))
    tools = list(c.context.tools)
    assert len(tools) > 1
    first = c.request_tokens_bound(c.context)
    for _ in range(3):
        c.context.tools = list(tools)
        assert c.request_tokens_bound(c.context) == first
    assert len(counted) == 2  # the system prompt and the schemas, once
    c.context.tools = tools[:-1]
    fewer = c.request_tokens_bound(c.context)
    assert fewer < first
    assert fewer - module.static_tokens(c.context.system_prompt, tools[:-1]) == first - module.static_tokens(
        c.context.system_prompt, tools)


async def test_each_messages_bound_is_computed_once_while_it_stays_in_the_context(tmp_path: Path, monkeypatch: Any) -> None:
    """Before every model call the context is bounded again: the messages already bounded are not
    rendered again (their tool calls' arguments were encoded again at every call), only the new ones."""
    from services.runtime.runs import compactor as module

    calls = [ToolCall(id=f"c{i}", name="read", arguments={"path": f"f{i}.txt", "limit": i}) for i in range(40)]
    history: list[AgentMessage] = [UserMessage(content="go"), AssistantMessage(content=calls)]
    c, _, _ = compactor(tmp_path, list(history))
    bounded: list[AgentMessage] = []
    real = module.context_tokens_bound

    def bound(messages: Any, *args: Any) -> int:
        bounded.extend(messages)
        return real(messages, *args)

    monkeypatch.setattr(module, "context_tokens_bound", bound)
    static = module.static_tokens(c.context.system_prompt, c.context.tools)
    first = c.request_tokens_bound(c.context)
    assert first == static + real(history, c.model, c.image_detail) and bounded == history
    later = UserMessage(content="more")
    c.context.messages = [*history, later]
    assert c.request_tokens_bound(c.context) == static + real([*history, later], c.model, c.image_detail)
    assert bounded == [*history, later]  # before: the 40 calls rendered again at every model call
    edited = UserMessage(content="go, differently")  # a rewind: another message in the same place
    c.context.messages = [edited, history[1]]
    assert c.request_tokens_bound(c.context) == static + real([edited, history[1]], c.model, c.image_detail)
    assert bounded[-1] is edited and len(bounded) == 4
