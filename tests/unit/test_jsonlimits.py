"""`json_problem`: the raw-bytes depth and number check of shared/serving/jsonlimits.py (no parser, no recursion)."""

from __future__ import annotations

import json

import pytest

from shared.serving.jsonlimits import json_problem


def nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


@pytest.mark.parametrize("levels", [1, 10, 64])
def test_depth_up_to_the_limit_passes(levels: int) -> None:
    assert json_problem(nested(levels), 64, 100) is None


@pytest.mark.parametrize("levels", [65, 250, 100_000])
def test_depth_over_the_limit_is_named(levels: int) -> None:
    assert "nesting" in (json_problem(nested(levels), 64, 100) or "")


def test_objects_and_arrays_count_alike() -> None:
    body = b'{"a": [{"b": [1]}]}'
    assert json_problem(body, 4, 100) is None
    assert json_problem(body, 3, 100) is not None


def test_brackets_and_digits_inside_strings_do_not_count() -> None:
    text = '[[[[ {{{{ \\" ]]]] ' + "9" * 500
    body = json.dumps({"s": text, "k" * 10: ["\\", '"', text]}).encode()
    assert json_problem(body, 3, 100) is None


def test_number_length() -> None:
    assert json_problem(b'{"n": ' + b"1" * 100 + b"}", 64, 100) is None
    assert "digits" in (json_problem(b'{"n": ' + b"1" * 101 + b"}", 64, 100) or "")
    assert "digits" in (json_problem(b'[1.' + b"0" * 5000 + b"]", 64, 100) or "")
    assert json_problem(b"[1e308, -0.5, 12345678901234567890]", 64, 100) is None
