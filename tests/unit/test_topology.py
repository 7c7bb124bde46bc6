"""shared/redis/topology.py: one registry of streams, groups, producers and inbox members, and its readers
(the trimmer, the metrics collector, the inbox reader) agree with it."""

from __future__ import annotations

import typing

import pytest

from shared.contracts.streams.inbox import INBOX_ADAPTER, InboxMessage
from shared.redis import keys, topology
from shared.streams import inbox, trim
from shared.telemetry import metrics


def test_inbox_members_are_the_inbox_union() -> None:
    union = set(typing.get_args(typing.get_args(InboxMessage)[0]))
    assert set(topology.INBOX_MEMBERS) == union and len(topology.INBOX_MEMBERS) == len(union)
    for model in topology.INBOX_MEMBERS:  # each member is a message the inbox adapter accepts
        assert model.model_fields["type"].default is not None
    produced = {m for models in topology.INBOX_PRODUCERS.values() for m in models}
    assert produced == union, "every inbox member has a producer, and producers send only members"
    assert set(topology.INBOX_PRODUCERS) <= set(topology.SERVICES)
    assert INBOX_ADAPTER.validate_python({"type": "stop", "session_id": "s"}).type == "stop"


def test_groups_are_named_after_their_services() -> None:
    assert [topology.group_of(s) for s in topology.SERVICES] == list(topology.SERVICES)
    assert topology.group_of("runtime") == keys.RUNTIME_GROUP == inbox.GROUP
    with pytest.raises(ValueError, match="unknown service"):
        topology.group_of("billing")


def test_every_consumed_stream_has_a_producer() -> None:
    produced = {p.stream for p in topology.PUBLICATIONS}
    for c in topology.CONSUMPTIONS:
        assert c.service in topology.SERVICES
        assert c.stream in produced, f"nobody publishes {c.stream}, which {c.service} reads"
    assert topology.consumed_streams("proxy") == ()
    assert topology.consumed_streams("compaction") == (keys.COMPACTION_REQUESTS,)


def test_the_trimmer_waits_for_every_group_of_the_topology() -> None:
    assert {
        keys.ARTIFACT_CHANGES: frozenset({"digest"}),
        keys.LIFECYCLE: frozenset({"digest", "notifications"}),
        keys.INJECTIONS_RECORDED: frozenset({"digest", "notifications"}),
        keys.COMPACTION_REQUESTS: frozenset({"compaction"}),
        keys.DIGEST_FLUSH: frozenset({"digest"}),
        keys.NOTIFICATIONS: frozenset({"notifications"}),
        keys.WAKE: frozenset({"runtime"}),
    } == trim.EXPECTED_GROUPS


def test_the_metrics_collector_reads_the_services_streams() -> None:
    stats = metrics.StreamStats(client=None, service="digest")  # type: ignore[arg-type]
    assert (stats.group, set(stats.streams)) == (
        "digest", {keys.ARTIFACT_CHANGES, keys.LIFECYCLE, keys.INJECTIONS_RECORDED, keys.DIGEST_FLUSH},
    )
    assert metrics.StreamStats(client=None, service="proxy").streams == ()  # type: ignore[arg-type]
