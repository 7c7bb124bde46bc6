"""ARI parsing (seed: "ARIs and views"): each scheme, query state, location, tab identity by base resource."""

from __future__ import annotations

import pytest

from shared.ari import AriError, parse_ari, same_tab, tab_key


def test_file_with_query_and_location() -> None:
    ari = parse_ari("file:gamma-agent/session/generations/q3/brief.xml?view=source&wrap=1#L12")
    assert ari.scheme == "file"
    assert ari.resource == "gamma-agent/session/generations/q3/brief.xml"
    assert ari.query_dict == {"view": "source", "wrap": "1"}
    assert ari.location == "L12"
    assert ari.base == "file:gamma-agent/session/generations/q3/brief.xml"
    assert not ari.is_directory


def test_file_directory_and_percent_encoding() -> None:
    ari = parse_ari("file:uploads/")
    assert ari.is_directory and ari.resource == "uploads/"
    spaced = parse_ari("file:my%20notes/a%23b.md")
    assert spaced.resource == "my notes/a#b.md"
    assert parse_ari(str(spaced)) == spaced  # rendering round-trips


@pytest.mark.parametrize("bad", ["file:", "file:/etc/passwd", "file:a/../../b", "file:a\\b", "file:a\x00b"])
def test_file_refuses_paths_outside_the_workspace(bad: str) -> None:
    with pytest.raises(AriError):
        parse_ari(bad)


def test_gamma_file_keeps_colons_in_the_document_id_and_card_location() -> None:
    ari = parse_ari("gamma:file:g_123:d_456?mode=edit#card_3")
    assert ari.scheme == "gamma:file"
    assert ari.resource == "g_123:d_456"
    assert ari.query_dict == {"mode": "edit"}
    assert ari.location == "card_3"
    assert ari.base == "gamma:file:g_123:d_456"
    # "gamma:file:" is matched before "file:" even though it contains it
    assert parse_ari("gamma:file:deck").scheme == "gamma:file"


def test_gamma_file_refuses_bad_ids() -> None:
    with pytest.raises(AriError):
        parse_ari("gamma:file:")
    with pytest.raises(AriError):
        parse_ari("gamma:file:has space")


def test_form() -> None:
    ari = parse_ari("form:f_audience?step=2")
    assert (ari.scheme, ari.resource, ari.query_dict, ari.location) == ("form", "f_audience", {"step": "2"}, None)
    with pytest.raises(AriError):
        parse_ari("form:")


def test_builtin() -> None:
    ari = parse_ari("builtin:settings/model#temperature")
    assert (ari.scheme, ari.resource, ari.location) == ("builtin", "settings/model", "temperature")
    with pytest.raises(AriError):
        parse_ari("builtin:<script>")


@pytest.mark.parametrize("bad", ["", "http://example.com", "files:a", "gamma:deck:x", "x" * 3000])
def test_unknown_schemes_and_oversized_references(bad: str) -> None:
    with pytest.raises(AriError):
        parse_ari(bad)


def test_tab_identity_uses_the_base_resource() -> None:
    assert same_tab("gamma:file:d1#card_1", "gamma:file:d1?mode=present#card_9")
    assert same_tab("file:brief.xml?view=source", "file:brief.xml")
    assert not same_tab("file:brief.xml", "file:brief.md")
    assert not same_tab("gamma:file:d1", "file:d1")  # same id, different scheme
    assert tab_key("form:f1?x=1#y") == "form:f1"


def test_location_change_keeps_identity_but_changes_the_reference() -> None:
    ari = parse_ari("gamma:file:d1#card_1")
    moved = ari.with_location("card_2")
    assert moved.base == ari.base
    assert str(moved) == "gamma:file:d1#card_2" and str(ari) != str(moved)
