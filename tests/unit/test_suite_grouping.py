"""`make test`'s work units (tests/conftest.py): a module's tests share a worker, and so do all of
tests/cluster (one local Redis Cluster)."""

from __future__ import annotations

from tests.conftest import group_of


def test_a_modules_tests_are_one_group_and_the_cluster_directory_is_one() -> None:
    assert group_of("tests/integration/test_abort.py::test_a") == group_of("tests/integration/test_abort.py::test_b[x]")
    assert group_of("tests/integration/test_abort.py::test_a") != group_of("tests/integration/test_bus.py::test_a")
    assert group_of("tests/cluster/test_cluster_digest.py::t") == group_of("tests/cluster/test_cluster_faults.py::t") \
        == "cluster"
