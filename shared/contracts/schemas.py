"""Every contract model by name; `python -m shared.contracts.schemas DIR` writes their JSON Schemas."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from shared.contracts import http
from shared.contracts.records import connectors, documents, pending, todo, transcript, ui
from shared.contracts.records.client import PromptClientContext
from shared.contracts.records.messages import AgentMessage
from shared.contracts.streams import (
    artifacts,
    causal,
    compaction,
    deadletter,
    events,
    inbox,
    lifecycle,
    notifications,
    recorded,
    wake,
)

CONTRACTS: dict[str, type[BaseModel] | TypeAdapter[Any]] = {
    # streams
    "stream.runtime_wake": wake.Wake,
    "stream.inbox": inbox.INBOX_ADAPTER,
    "stream.inbox_reply": inbox.InboxReply,
    "stream.events": events.SessionEvent,
    "stream.events_entry": events.EventEntry,
    "stream.lifecycle": lifecycle.LIFECYCLE_ADAPTER,
    "stream.artifact_changes": artifacts.ArtifactChange,
    "stream.injections_recorded": recorded.InjectionRecorded,
    "stream.compaction_requests": compaction.CompactionRequest,
    "stream.digest_flush": causal.FlushRequest,
    "stream.notifications": notifications.NotificationSubmit,
    "stream.connector_calls": connectors.ConnectorCall,
    "stream.deadletter": deadletter.DeadLetter,
    # disk files
    "disk.transcript_entry": transcript.ENTRY_ADAPTER,
    "disk.agent_message": TypeAdapter(AgentMessage),
    "disk.state": ui.SessionUIState,
    "disk.todo": todo.TodoList,
    "disk.pending_artifacts": pending.PendingArtifactUpdates,
    "disk.document": documents.StoredDeck,
    # HTTP bodies
    "http.create_session": http.CreateSession,
    "http.session": http.SessionView,
    "http.session_list": http.SessionList,
    "http.post_message": http.PostMessage,
    "http.message_accepted": http.MessageAccepted,
    "http.ui_sync": http.UiSync,
    "http.ui_state": http.UiState,
    "http.preview": http.Preview,
    "http.transcript": http.Transcript,
    "http.compact": http.CompactBody,
    "http.abort": http.AbortBody,
    "http.abort_result": http.AbortResult,
    "http.accepted": http.Accepted,
    "http.error": http.ErrorBody,
    "http.deck": documents.Deck,
    "http.prompt_client_context": PromptClientContext,
    "http.connector_spec": connectors.ConnectorSpec,
    "http.connector": connectors.Connector,
    "http.connector_result": connectors.ConnectorResultSubmit,
    "http.connector_result_accepted": connectors.ConnectorResultAccepted,
    "http.notification_accepted": notifications.NotificationAccepted,
}


def schema_of(model: type[BaseModel] | TypeAdapter[Any]) -> dict[str, Any]:
    if isinstance(model, TypeAdapter):
        return model.json_schema(by_alias=True)
    return model.model_json_schema(by_alias=True)


def all_schemas() -> dict[str, dict[str, Any]]:
    return {name: schema_of(model) for name, model in CONTRACTS.items()}


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in all_schemas().items():
        path = directory / f"{name}.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/contract/schemas")
    for p in write(out):
        print(p)
