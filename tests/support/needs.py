"""Tests that need something from outside the venv: a program (kubectl, node and node_modules, chromium,
bubblewrap, redis-server), FUSE, root. On a developer machine a missing one skips the test; under CI (the
CI variable set, as .ci/run sets it) it fails the test, because .ci/run installs every one of them, so a
CI run can never pass by skipping what it was meant to check.

A kernel feature that no install brings (openat2, Landlock) stays a plain skip: a CI machine without
it cannot be fixed by .ci/run.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

MARK = "needs"


def under_ci() -> bool:
    """CI=true (.ci/run) or any other non-empty value but 0/false/no, as CI systems set it."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def needs(why_missing: str | None) -> pytest.MarkDecorator:
    """A mark for a test or module: `why_missing` None when the tool is there, else why not (the skip
    reason). tests/conftest.py turns the mark into a skip or, under CI, a failure at set-up."""
    return getattr(pytest.mark, MARK)(why_missing)


def missing(why: str) -> NoReturn:
    """Inside a test: skip, or under CI fail, because of a missing tool."""
    if under_ci():
        pytest.fail(f"{why}: .ci/run installs it, so under CI its absence is a failure, not a skip", pytrace=False)
    pytest.skip(why)


def check(item: pytest.Item) -> None:
    """Every `needs` mark on the item (module marks included) whose tool is missing."""
    for mark in item.iter_markers(MARK):
        why = mark.args[0] if mark.args else None
        if why is not None:
            missing(str(why))
