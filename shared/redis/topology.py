"""Who reads and writes which stream, in one place (docs/architecture.md "Streams").

The services wire their subscriptions from `CONSUMPTIONS`, the metrics collector reads lag and
pending of the groups listed here, the trimmer waits for every group expected on a stream, and the
AsyncAPI generator (tools/docs.py) documents producers, consumers and the inbox members from it.
A service's consumer group on a service-level stream is named after the service.
"""

from __future__ import annotations

import os
import socket
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter

from shared.contracts.streams import (
    artifacts,
    causal,
    compaction,
    inbox,
    lifecycle,
    notifications,
    recorded,
    wake,
)
from shared.redis import keys
from shared.settings import env_setting

SERVICES = ("proxy", "runtime", "notifications", "digest", "compaction")
EXTERNAL = "producers"  # remote notification producers, outside the five services


def group_of(service: str) -> str:
    """The consumer group a service reads its streams in (the per-session inboxes included)."""
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}")
    return service


def consumer_name(service: str) -> str:
    """Stable per replica: the pod name (HOSTNAME) or host-pid when run locally."""
    return f"{service}-{env_setting('instance') or socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Consumption:
    """`service` reads `stream` in its group, validating each entry as `model`."""

    service: str
    stream: str
    model: type[BaseModel] | TypeAdapter[Any]

    @property
    def group(self) -> str:
        return group_of(self.service)


@dataclass(frozen=True)
class Publication:
    """`service` XADDs `model` entries to `stream` (through `shared.streams.bus.publish`)."""

    service: str
    stream: str
    model: Any
    description: str


CONSUMPTIONS: tuple[Consumption, ...] = (
    Consumption("runtime", keys.WAKE, wake.Wake),
    Consumption("notifications", keys.NOTIFICATIONS, notifications.NotificationSubmit),
    Consumption("notifications", keys.LIFECYCLE, lifecycle.LIFECYCLE_ADAPTER),
    Consumption("notifications", keys.INJECTIONS_RECORDED, recorded.InjectionRecorded),
    Consumption("digest", keys.ARTIFACT_CHANGES, artifacts.ArtifactChange),
    Consumption("digest", keys.LIFECYCLE, lifecycle.LIFECYCLE_ADAPTER),
    Consumption("digest", keys.INJECTIONS_RECORDED, recorded.InjectionRecorded),
    Consumption("digest", keys.DIGEST_FLUSH, causal.FlushRequest),
    Consumption("compaction", keys.COMPACTION_REQUESTS, compaction.CompactionRequest),
)

PUBLICATIONS: tuple[Publication, ...] = (
    Publication("proxy", keys.WAKE, wake.Wake, "A prompt for a dormant session: wake it (proxy writes status=waking first)."),
    Publication("notifications", keys.WAKE, wake.Wake, "An urgent notification may wake a dormant session (policy; off by default)."),
    Publication(EXTERNAL, keys.NOTIFICATIONS, notifications.NotificationSubmit,
                "In-cluster remote producers may XADD the POST /notifications body here instead of calling HTTP."),
    Publication("runtime", keys.LIFECYCLE, lifecycle.LifecycleEvent, "SessionLive after a wake; SessionDormant after persisting."),
    Publication("proxy", keys.ARTIFACT_CHANGES, artifacts.ArtifactChange, "User file and document writes (actor=user), after they are applied."),
    Publication("runtime", keys.ARTIFACT_CHANGES, artifacts.ArtifactChange, "Changes made by the agent's own tools (actor=agent), with the new content."),
    Publication("runtime", keys.INJECTIONS_RECORDED, recorded.InjectionRecorded,
                "An injection's transcript entry is durable: its owner may clear its pending state."),
    Publication("runtime", keys.DIGEST_FLUSH, causal.FlushRequest,
                "A prompt (or the next model call) waits for artifact changes still in flight: flush them now."),
    Publication("runtime", keys.COMPACTION_REQUESTS, compaction.CompactionRequest, "Context passed the threshold, or POST /compact."),
)

# The per-session inbox `gamma:{sid}:inbox`: every member of the `InboxMessage` union, read by the
# runtime (group `runtime`, through shared/streams/inbox.py), appended by these services.
INBOX_MEMBERS: tuple[type[BaseModel], ...] = typing.get_args(typing.get_args(inbox.InboxMessage)[0])
INBOX_READER = "runtime"
INBOX_PRODUCERS: dict[str, tuple[type[BaseModel], ...]] = {
    "proxy": (inbox.UserPrompt, inbox.UiUpdate, inbox.FileWrite, inbox.DocumentEdit, inbox.Stop, inbox.Compact,
              inbox.FileDelete, inbox.DocumentDelete,
              inbox.Injection,  # Injection: workspace_update for a knowledge note (routes/knowledge.py)
              inbox.Abort, inbox.Rewind,
              inbox.ModelChange),  # ModelChange: PATCH /sessions/{id} of a live session's model
    "notifications": (inbox.Injection, inbox.Barrier, inbox.ConnectorResult),
    # Injection: a subagent's background_result, a connector's workspace_update (services/runtime/connector/connectors.py)
    "runtime": (inbox.Injection,),
    "digest": (inbox.Injection, inbox.ChangesSettled),
    "compaction": (inbox.CompactionReady,),
}


def consumptions(service: str) -> tuple[Consumption, ...]:
    return tuple(c for c in CONSUMPTIONS if c.service == service)


def consumed_streams(service: str) -> tuple[str, ...]:
    """The service-level streams `service` reads (the inboxes are too many to list)."""
    return tuple(c.stream for c in consumptions(service))


def groups_by_stream() -> Mapping[str, frozenset[str]]:
    """stream -> every consumer group expected on it."""
    out: dict[str, set[str]] = {}
    for c in CONSUMPTIONS:
        out.setdefault(c.stream, set()).add(c.group)
    return {stream: frozenset(groups) for stream, groups in out.items()}
