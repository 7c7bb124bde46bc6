"""The order groups are handed out in under xdist (tests/conftest.py longest_first,
tests/support/group_order.py): the longest measured first, a group it does not know by its number of
tests, a `quiet_end` group where the shortest groups after it keep the other workers busy as long as
it runs, a group's tests in their own order."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import group_of, longest_first
from tests.support import group_order
from tests.support.group_order import UNKNOWN_S_PER_TEST, Group, hand_out_order, seconds_from_junit


@dataclass
class Mark:
    args: tuple[Any, ...] = ()


@dataclass
class Item:
    nodeid: str
    marks: dict[str, Mark] = field(default_factory=dict)

    def get_closest_marker(self, name: str) -> Mark | None:
        return self.marks.get(name)


class Config:
    @staticmethod
    def getini(name: str) -> str:
        assert name == "timeout"
        return "120"


def test_measured_groups_longest_first_and_unknown_ones_by_their_number_of_tests() -> None:
    known = {"a": 10.0, "b": 300.0, "c": 40.0}
    groups = [Group("a", 5), Group("new", 30), Group("b", 2), Group("c", 1), Group("tiny", 1)]
    assert 30 * UNKNOWN_S_PER_TEST > 40.0 > UNKNOWN_S_PER_TEST  # the new group lands between b and c
    assert hand_out_order(groups, known, workers=3) == ["b", "new", "c", "a", "tiny"]


def test_equal_estimates_go_by_the_longest_timeout() -> None:
    groups = [Group("short", 1, 60.0), Group("long", 1, 600.0)]
    assert hand_out_order(groups, {}, workers=3) == ["long", "short"]


def test_a_quiet_end_group_runs_beside_the_shortest_groups_only() -> None:
    known = {"soak": 200.0, "big": 500.0, "mid": 150.0} | {f"u{i}": 50.0 for i in range(20)}
    groups = [Group("soak", 1, quiet_end=True), Group("big"), Group("mid")] + [Group(f"u{i}") for i in range(20)]
    order = hand_out_order(groups, known, workers=3)
    after = order[order.index("soak") + 1:]
    # The two other workers have 1.5 x 2 x 200 s of the shortest groups to run beside it (the margin:
    # measured figures are off either way, and a soak handed out too late runs on alone), no more.
    assert sum(known[g] for g in after) == 600.0 and set(after) <= {f"u{i}" for i in range(20)}
    assert order[:2] == ["big", "mid"]
    assert hand_out_order(groups, known, workers=1)[-1] == "soak"  # one process: after everything
    # Less to run beside it than it lasts: first (it is the longest of all).
    assert hand_out_order([Group("soak", 1, quiet_end=True), Group("u0")], known, workers=3)[0] == "soak"


def test_longest_first_keeps_each_groups_tests_together_in_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_order, "known_seconds", lambda: {"tests/hostile/test_trees.py": 100.0})
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    items = [
        Item("tests/unit/test_a.py::t1"),
        Item("tests/reliability/test_soak.py::test_soak", {"timeout": Mark((480,)), "quiet_end": Mark()}),
        Item("tests/hostile/test_trees.py::t1", {"timeout": Mark((600,))}),
        Item("tests/unit/test_a.py::t2"),
        Item("tests/reliability/test_faults.py::t", {"timeout": Mark((300,))}),
        Item("tests/hostile/test_trees.py::t2"),
    ]
    longest_first(Config(), items)  # type: ignore[arg-type]
    # test_a: two tests, guessed 2 x UNKNOWN_S_PER_TEST; test_faults and the soak one test each. The soak
    # goes where what follows it (test_a and test_faults) is at least twice its guess.
    assert [i.nodeid for i in items] == [
        "tests/hostile/test_trees.py::t1", "tests/hostile/test_trees.py::t2",
        "tests/reliability/test_soak.py::test_soak",
        "tests/unit/test_a.py::t1", "tests/unit/test_a.py::t2",
        "tests/reliability/test_faults.py::t",
    ]


def test_the_figures_come_from_a_junit_report(tmp_path: Path) -> None:
    report = tmp_path / "suite.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.unit.test_walk" name="test_a" time="1.5"/>'
        '<testcase classname="tests.unit.test_walk" name="test_b[x]" time="2.0"/>'
        '<testcase classname="tests.cluster.test_cluster_digest" name="test_c" time="3.0"/>'
        '<testcase classname="tests.cluster.test_cluster_faults" name="test_d" time="4.0"/>'
        '<testcase classname="tests.nowhere.test_gone" name="test_e" time="9.0"/>'
        '</testsuite></testsuites>')
    assert seconds_from_junit(report, group_of) == {"tests/unit/test_walk.py": 3.5, "cluster": 7.0}
