"""The order `make test` hands its groups out in (tests/conftest.py longest_first): longest first.

Under pytest-xdist's scope scheduler a worker takes the next group when it is done with one, so the run
ends when the last group handed out ends: with the long groups first and the short ones last, the
workers finish within a short group of each other (a long group handed out late ran on alone). How long
a group takes comes from a measured run (group_seconds.json beside this file); a group it does not
know (a new module) counts UNKNOWN_S_PER_TEST a test, and among equals the longest per-test timeout
goes first.

A `quiet_end` group (the soak: a measurement over minutes) goes as late as it can while still ending
with the others: where the groups after it, spread over the other workers, last as long as it does.
Those are the shortest groups, so the load beside it only lessens while it measures.

Refresh the figures on a quiet machine (figures from a loaded run put the soak too late) after a change in what the suite runs (the order only changes, never the tests):
    make test PYTEST_ARGS=--junitxml=/tmp/suite.xml
    .venv/bin/python -m tests.support.group_order /tmp/suite.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SECONDS_FILE = Path(__file__).with_name("group_seconds.json")
ROOT = Path(__file__).resolve().parents[2]
UNKNOWN_S_PER_TEST = 2.0  # about an integration test's (a stack's tests); a unit test is far less
KEEP_S = 1.0  # groups shorter than this are left out of the file: the per-test guess is as good
# The groups after a quiet_end one must last this much longer than it: figures measured on another
# run are off either way, and a soak placed too late runs on alone at the end (it did, 3 minutes).
QUIET_MARGIN = 1.5


@dataclass
class Group:
    name: str
    tests: int = 0
    longest_timeout: float = 0.0
    quiet_end: bool = False


def known_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)} if isinstance(raw, dict) else {}


def estimate(group: Group, known: dict[str, float]) -> float:
    return known.get(group.name, group.tests * UNKNOWN_S_PER_TEST)


def hand_out_order(groups: list[Group], known: dict[str, float], workers: int) -> list[str]:
    """Group names, longest first; each quiet_end group placed where the estimates after it add up to
    QUIET_MARGIN x (workers - 1) times its own (first when they never do: it is then the longest of all; last with one
    worker)."""
    ordered = sorted((g for g in groups if not g.quiet_end),
                     key=lambda g: (-estimate(g, known), -g.longest_timeout))
    names = [g.name for g in ordered]
    for quiet in sorted((g for g in groups if g.quiet_end), key=lambda g: estimate(g, known)):
        need, after, at = QUIET_MARGIN * (max(workers, 1) - 1) * estimate(quiet, known), 0.0, len(ordered)
        while at > 0 and after < need:
            at -= 1
            after += estimate(ordered[at], known)
        names.insert(names.index(ordered[at].name) if at < len(ordered) else len(names), quiet.name)
    return names


def seconds_from_junit(xml_path: Path, group_of: Callable[[str], str]) -> dict[str, float]:
    """Seconds per group (setup, call and teardown: junit's `time`) from pytest's --junitxml report."""
    totals: dict[str, float] = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        path = module_path(case.get("classname") or "")
        if path is not None:
            group = group_of(f"{path}::{case.get('name')}")
            totals[group] = totals.get(group, 0.0) + float(case.get("time") or 0.0)
    return totals


def module_path(classname: str) -> str | None:
    """`tests.integration.test_x.TestY` -> `tests/integration/test_x.py` (the longest prefix that is a file)."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (ROOT / candidate).is_file():
            return candidate
    return None


def main(argv: list[str]) -> int:
    from tests.conftest import group_of

    if len(argv) != 1:
        print("usage: python -m tests.support.group_order REPORT.xml", file=sys.stderr)
        return 2
    totals = seconds_from_junit(Path(argv[0]), group_of)
    kept = {group: round(s, 1) for group, s in sorted(totals.items()) if s >= KEEP_S}
    SECONDS_FILE.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")
    print(f"{len(kept)} groups of {len(totals)} written to {SECONDS_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
