"""Properties of the one builder of trusted blocks (shared/trust/trusted_blocks.py), over arbitrary strings:
a rendered block is exactly one element of its kind, every interpolated value comes back unchanged,
and no reserved tag appears unescaped inside."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.trust.reserved_tags import RESERVED_TAGS, TAG_RULE
from shared.trust.trusted_blocks import (
    element,
    escape_attr,
    escape_text,
    extract,
    fragment,
    lines,
    quoted,
    render,
    unescape,
    unescape_attr,
)
from tests.support.trusted import assert_one_block, attrs_of, hostile, payload, quoted_text

tags = st.sampled_from(RESERVED_TAGS)


@given(hostile)
def test_escaped_text_comes_back_and_holds_no_reserved_tag(text: str) -> None:
    escaped = escape_text(text)
    assert unescape(escaped) == text
    assert not TAG_RULE.search(escaped)


@given(hostile)
def test_attribute_values_come_back_and_cannot_leave_their_quotes(value: str) -> None:
    escaped = escape_attr(value)
    assert unescape_attr(escaped) == value
    assert not set(escaped) & set("<>\"'\n\r\t")


@given(tags.filter(lambda t: t != "quoted"), hostile, hostile, hostile)
def test_a_block_is_one_element_with_its_values_recoverable(tag: str, attr: str, body: str, said: str) -> None:
    text = render(tag, {"ref": attr, "n": 3, "gone": None}, lines(body, "The user said:", quoted("user", said)))
    assert_one_block(text, tag, ["<quoted", "</quoted"])
    assert attrs_of(text, tag) == {"ref": attr, "n": "3"}
    assert quoted_text(text) == said
    assert extract(text, tag) is not None and extract(text, tag)[0].startswith(body)  # type: ignore[index]


@given(tags, st.lists(hostile, max_size=6))
def test_strings_split_across_parts_still_cannot_form_a_tag(tag: str, parts: list[str]) -> None:
    text = render(tag, None, parts)
    assert_one_block(text, tag)
    assert extract(text, tag) == ("".join(parts), len(text))


@pytest.mark.parametrize("tag", RESERVED_TAGS)
def test_the_attack_payload_stays_text(tag: str) -> None:
    text = render(tag, {"ref": payload(tag)}, payload(tag))
    assert_one_block(text, tag)
    assert "<system_guidance>" not in text and "&lt;system_guidance>" in text
    assert "IGNORE&lt;/system_guidance\u200b>" in text and "&#xFE64;system-guidance" in text


def test_only_reserved_tags_make_a_top_level_block_and_names_are_checked() -> None:
    with pytest.raises(ValueError):
        render("div", None, "x")
    with pytest.raises(ValueError):
        element("a b", None, "x")
    with pytest.raises(ValueError):
        render("system_note", {"on click": "x"}, "x")


def test_nested_harness_elements_are_kept_and_layouts() -> None:
    inner = element("knowledge", {"id": "k1"}, empty=True)
    assert render("knowledge_hints", None, lines("  x", fragment(["  ", inner]))) == (
        '<knowledge_hints>\n  x\n  <knowledge id="k1"/>\n</knowledge_hints>')
    assert element("skill", {"name": "a"}, "d", inline=True).text == '<skill name="a">d</skill>'
    assert render("available_skills") == "<available_skills>\n</available_skills>"
