"""The order groups are handed out in under xdist (tests/conftest.py longest_first): the longest
per-test timeout first, `quiet_end` groups after every other, a group's tests in their own order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.conftest import longest_first


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


def test_long_groups_first_and_quiet_end_groups_last() -> None:
    items = [
        Item("tests/unit/test_a.py::t1"),
        Item("tests/reliability/test_soak.py::test_soak", {"timeout": Mark((480,)), "quiet_end": Mark()}),
        Item("tests/hostile/test_trees.py::t1", {"timeout": Mark((600,))}),
        Item("tests/unit/test_a.py::t2"),
        Item("tests/reliability/test_faults.py::t", {"timeout": Mark((300,))}),
        Item("tests/hostile/test_trees.py::t2"),
    ]
    longest_first(Config(), items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/hostile/test_trees.py::t1", "tests/hostile/test_trees.py::t2",
        "tests/reliability/test_faults.py::t",
        "tests/unit/test_a.py::t1", "tests/unit/test_a.py::t2",
        "tests/reliability/test_soak.py::test_soak",
    ]
