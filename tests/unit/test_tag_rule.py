"""The one reserved-tag rule (shared/trust/reserved_tags.py): its look-alike table is Unicode's, every
character that reads as `<` is a candidate, and each invisible or look-alike spelling reads as the tag."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.trust.reserved_tags import _INVISIBLE, OPENERS, RESERVED_TAGS, TAG_RULE, _opening_at, fold
from shared.trust.tag_confusables import LOOKALIKES
from tests.support.trusted import ANY_TEXT, FRAGMENTS, INVISIBLE, LISTED_FORGERIES, LT_FORMS, forged_tag
from tools.tag_confusables import table

TEXTS = st.lists(st.one_of(forged_tag(), ANY_TEXT, st.sampled_from(FRAGMENTS + INVISIBLE + LT_FORMS),
                           st.sampled_from(RESERVED_TAGS)), max_size=10).map("".join)


def test_the_committed_table_is_the_generated_one() -> None:
    assert table() == LOOKALIKES


def test_every_character_that_reads_as_an_opener_is_a_candidate() -> None:
    """Over all of Unicode: a character folding to `<` is in OPENERS (the fast scan finds it), and each
    opener folds to `<` (unassigned code points fold to themselves or to nothing)."""
    assigned = (chr(cp) for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) not in ("Cn", "Cs"))
    readers = {c for c in assigned if len(fold(c)) == 1 and "<" in fold(c)[0]}
    assert readers == set(OPENERS)


@pytest.mark.parametrize("forged", LISTED_FORGERIES)
def test_each_listed_forgery_reads_as_its_tag(forged: str) -> None:
    found = TAG_RULE.match(forged)
    assert found is not None and found.tag in ("system_guidance", "quoted"), ascii(forged)


@pytest.mark.parametrize("tag", RESERVED_TAGS)
def test_full_width_cyrillic_and_mathematical_spellings(tag: str) -> None:
    wide = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in f"</{tag}>")
    assert TAG_RULE.match(wide) is not None and TAG_RULE.match(wide).closing  # type: ignore[union-attr]
    bold = "<" + "".join(unicodedata.lookup(f"MATHEMATICAL BOLD SMALL {c.upper()}") if c.isalpha() else c
                         for c in tag) + ">"
    assert TAG_RULE.match(bold) is not None
    cyr = "<" + tag.replace("a", "\u0430").replace("e", "\u0435").replace("o", "\u043e").replace("s", "\u0455") + ">"
    assert TAG_RULE.match(cyr) is not None
    soft = "<" + "\u00ad".join(tag) + "\u200d\ufe0f>"
    assert TAG_RULE.match(soft) is not None


def test_a_different_name_is_not_a_reserved_one() -> None:
    for text in ("<summaryx>", "<summary_v2>", "<skills>", "<skill-set>", "<system>", "<quotedly", "<div>",
                 "<s\u0443mmary2>", "\u3008summaryx\u3009", "<ad\u200bmin>"):
        assert TAG_RULE.search(text) is None, ascii(text)


def test_the_fast_scan_skips_only_invisible_characters() -> None:
    """Every character the candidate scan steps over as invisible is one the rule drops."""
    for c in (chr(cp) for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp < 0xE000):
        if re.fullmatch("[" + _INVISIBLE + "]", c):
            assert fold(c) == (), hex(ord(c))


@settings(max_examples=400, deadline=None)
@given(TEXTS)
def test_the_fast_paths_find_what_the_walk_finds(text: str) -> None:
    """The candidate scan and the ASCII shortcut are speed only: the same openings as the walk from
    every opener."""
    walk = [(i, m.end(), m.canonical()) for i, c in enumerate(text) if c in OPENERS
            and (m := _opening_at(text, i)) is not None]
    assert [(m.start(), m.end(), m.canonical()) for m in TAG_RULE.finditer(text)] == walk
