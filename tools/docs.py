"""`python -m tools.docs DIR` (`make docs`): the interface documents, generated from the code.

- `asyncapi.yaml` (AsyncAPI 3.0): every stream of shared/redis/topology.py. Its consumptions (the groups
  the services wire their subscriptions from; `service_subscriptions` reads back what each real
  `create_app` subscribed) are declared, with their contract models as payloads, on one FastStream
  broker per service whose specification FastStream writes. What FastStream cannot see is added from
  the same registry: the producers (services publish through `shared.streams.bus.publish` at call time, never
  as declared publishers), the per-session `gamma:{sid}:inbox` and `gamma:{sid}:events` (dynamic
  names, plain XADD), and `gamma:deadletter`.
- `openapi.json` (the proxy) and `openapi-notifications.json`: FastAPI's own documents; then the
  TypeScript client's types from `openapi.json` (tools/client_types.py).
- docs/operations.md's "Configuration" tables, one per area of shared/settings/, the deployment settings
  and the benchmark tuning knobs apart (tools/settings_table.py, shared/settings/tuning.py).
- docs/architecture.md's "Module map" and "Import layers" (tools/module_map.py).

Output is deterministic, so a test can regenerate and compare with the committed files.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from faststream import FastStream
from faststream.redis import RedisBroker, StreamSub
from faststream.specification import AsyncAPI
from pydantic import BaseModel, TypeAdapter

from shared.contracts.records import connectors
from shared.contracts.streams import deadletter, events, inbox, lifecycle
from shared.redis import keys, topology
from shared.redis.topology import EXTERNAL, INBOX_MEMBERS, INBOX_PRODUCERS, PUBLICATIONS, SERVICES
from shared.settings import Settings, from_defaults
from shared.settings.tuning import is_deployment, is_tuning
from shared.streams.bus import subscriptions_of
from tools import client_types, module_map, settings_table

TITLE = "Gamma harness streams"
OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
VERSION = "0.1.0"
REDIS_SERVER = "redis://localhost:6379"

Model = type[BaseModel] | TypeAdapter[Any]

# TypeAdapters stand for these annotated unions (FastStream needs the type, not the adapter).
ADAPTED_TYPES: dict[int, Any] = {
    id(lifecycle.LIFECYCLE_ADAPTER): lifecycle.LifecycleEvent,
    id(inbox.INBOX_ADAPTER): inbox.InboxMessage,
}


@dataclass(frozen=True)
class Recorded:
    service: str
    stream: str
    group: str
    model: Any


def default_settings() -> Settings:
    """Settings from the defaults only: the documents must not depend on who runs `make docs`. The apps
    are built, never run: a placeholder key gives them a model client that is never called."""
    return from_defaults(OPENAI_API_KEY="unused-by-docs")


def service_subscriptions(settings: Settings | None = None) -> list[Recorded]:
    """The (stream, group, model) every service subscribes, read back from its real `create_app`."""
    settings = settings or default_settings()
    found: list[Recorded] = []
    for service in SERVICES:
        module = importlib.import_module(f"services.{service}.app")
        broker = getattr(module.create_app(settings).state, "broker", None)
        if broker is None:
            continue  # a pure producer (the proxy)
        found.extend(Recorded(service, s.stream, s.group, s.adapter) for s in subscriptions_of(broker))
    return found


def declared_subscriptions() -> list[Recorded]:
    """The (stream, group, model) of shared/redis/topology.py, which the services wire theirs from."""
    return [Recorded(c.service, c.stream, c.group, c.model) for c in topology.CONSUMPTIONS]


def _payload_type(model: Any) -> Any:
    if isinstance(model, TypeAdapter):
        return ADAPTED_TYPES.get(id(model), model._type)
    return model


def _typed_handler(payload: Any) -> Callable[..., Any]:
    async def handler(body: Any) -> None:  # never runs: schema-only registration
        raise RuntimeError("documentation broker")

    handler.__annotations__ = {"body": payload, "return": None}
    return handler


def faststream_spec(service: str, subs: list[Recorded]) -> dict[str, Any]:
    """FastStream's AsyncAPI 3.0 for one service's subscriptions and publications."""
    broker = RedisBroker(REDIS_SERVER)
    for sub in subs:
        broker.subscriber(
            stream=StreamSub(sub.stream, group=sub.group, consumer=f"{sub.group}-<pod>"),
            title=f"{sub.stream}:{sub.group}",
            description=f"Consumer group `{sub.group}` ({service}); a claimer in the same group retries entries "
            "left pending (XAUTOCLAIM) and dead-letters them after the delivery cap.",
        )(_typed_handler(_payload_type(sub.model)))
    for pub in PUBLICATIONS:
        if pub.service == service:
            broker.publisher(
                stream=pub.stream, schema=pub.model, title=f"{pub.stream}:{service}:send", description=pub.description
            )
    app = FastStream(broker, specification=AsyncAPI(title=TITLE, version=VERSION, schema_version="3.0.0"))
    spec: dict[str, Any] = app.schema.to_specification().to_jsonable()
    return spec


def _schemas(models: tuple[type[BaseModel], ...] | list[type[BaseModel]]) -> dict[str, Any]:
    """JSON Schemas of `models` and their $defs, with refs into components/schemas."""
    out: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        for name, sub in schema.pop("$defs", {}).items():
            out[name] = sub
        out[model.__name__] = schema
    return out


def _hand_messages() -> dict[str, Any]:
    messages: dict[str, Any] = {}
    for model in INBOX_MEMBERS:
        messages[f"inbox.{model.__name__}"] = {
            "name": model.__name__,
            "title": model.__name__,
            "summary": (model.__doc__ or model.__name__).strip().splitlines()[0],
            "contentType": "application/json",
            "payload": {"$ref": f"#/components/schemas/{model.__name__}"},
        }
    messages["events.SessionEvent"] = {
        "name": "SessionEvent",
        "title": "SessionEvent",
        "contentType": "application/json",
        "payload": {"$ref": "#/components/schemas/SessionEvent"},
    }
    messages["connectors.ConnectorCall"] = {
        "name": "ConnectorCall",
        "title": "ConnectorCall",
        "summary": "One tool call for a connector: its arguments and the session id, nothing else of the session",
        "contentType": "application/json",
        "payload": {"$ref": "#/components/schemas/ConnectorCall"},
    }
    messages["deadletter.DeadLetter"] = {
        "name": "DeadLetter",
        "title": "DeadLetter",
        "contentType": "application/json",
        "payload": {"$ref": "#/components/schemas/DeadLetter"},
    }
    return messages


def _hand_channels() -> dict[str, Any]:
    sid = {"sid": {"description": "Session id; the {sid} hash tag keeps a session's keys on one Cluster slot."}}
    channels = {
        "gamma:{sid}:inbox": {
            "address": "gamma:{sid}:inbox",
            "description": "Everything that enters a live session, read by the lease holder only: one multiplexed "
            "XREADGROUP (group `runtime`) over the inboxes of the sessions a worker leases. Plain "
            "`XADD {type, data: <JSON>}` through shared/streams/inbox.py, not FastStream (the names are dynamic).",
            "parameters": sid,
            "messages": {m.__name__: {"$ref": f"#/components/messages/inbox.{m.__name__}"} for m in INBOX_MEMBERS},
            "bindings": {"redis": {"method": "xreadgroup", "groupName": topology.group_of(topology.INBOX_READER),
                                   "bindingVersion": "custom"}},
        },
        "gamma:{sid}:events": {
            "address": "gamma:{sid}:events",
            "description": "The runtime's event stream of one session (`XADD ... MAXLEN ~ 10000 * data <JSON>`); the "
            "proxy serves it as SSE with the entry id as the SSE id (resumable with Last-Event-ID).",
            "parameters": sid,
            "messages": {"SessionEvent": {"$ref": "#/components/messages/events.SessionEvent"}},
            "bindings": {"redis": {"method": "xread", "bindingVersion": "custom"}},
        },
        "gamma:connectors:{name}:calls": {
            "address": "gamma:connectors:{name}:calls",
            "description": "The calls to one connector (docs/architecture.md \"Connectors\"): the runtime appends "
            "(plain `XADD {type, data: <JSON>}`, MAXLEN ~ 10000) after writing the call's record; the connector "
            "reads in group `connector`, answers with `POST /connectors/{name}/results` on the notifications "
            "service, then XACKs. The answer reaches the session's inbox as a `ConnectorResult`.",
            "parameters": {"name": {"description": "The connector's registered name (`^[a-z][a-z0-9_-]{0,40}$`)."}},
            "messages": {"ConnectorCall": {"$ref": "#/components/messages/connectors.ConnectorCall"}},
            "bindings": {"redis": {"method": "xreadgroup", "groupName": keys.CONNECTOR_GROUP, "bindingVersion": "custom"}},
        },
        keys.DEADLETTER: {
            "address": keys.DEADLETTER,
            "description": "Entries that did not validate or reached the delivery cap, moved here (field `data`) and "
            "acked so one poison entry never stops a consumer. Any consumer group may write here.",
            "messages": {"DeadLetter": {"$ref": "#/components/messages/deadletter.DeadLetter"}},
            "bindings": {"redis": {"method": "xadd", "bindingVersion": "custom"}},
        },
    }
    return channels


def _hand_operations() -> dict[str, Any]:
    operations: dict[str, Any] = {}
    for service, models in INBOX_PRODUCERS.items():
        operations[f"gamma:{{sid}}:inbox:{service}:send"] = {
            "action": "send",
            "summary": f"{service} appends to a session's inbox",
            "channel": {"$ref": "#/channels/gamma:{sid}:inbox"},
            "messages": [{"$ref": f"#/channels/gamma:{{sid}}:inbox/messages/{m.__name__}"} for m in models],
        }
    operations[f"gamma:{{sid}}:inbox:{topology.INBOX_READER}:receive"] = {
        "action": "receive",
        "summary": "The lease holder reads the inbox; a new lease holder first claims the previous holder's pending entries",
        "channel": {"$ref": "#/channels/gamma:{sid}:inbox"},
        "messages": [{"$ref": f"#/channels/gamma:{{sid}}:inbox/messages/{m.__name__}"} for m in INBOX_MEMBERS],
    }
    operations["gamma:{sid}:events:runtime:send"] = {
        "action": "send",
        "channel": {"$ref": "#/channels/gamma:{sid}:events"},
        "messages": [{"$ref": "#/channels/gamma:{sid}:events/messages/SessionEvent"}],
    }
    operations["gamma:{sid}:events:proxy:receive"] = {
        "action": "receive",
        "summary": "SSE of GET /sessions/{id}/events",
        "channel": {"$ref": "#/channels/gamma:{sid}:events"},
        "messages": [{"$ref": "#/channels/gamma:{sid}:events/messages/SessionEvent"}],
    }
    calls = {"channel": {"$ref": "#/channels/gamma:connectors:{name}:calls"},
             "messages": [{"$ref": "#/channels/gamma:connectors:{name}:calls/messages/ConnectorCall"}]}
    operations["gamma:connectors:{name}:calls:runtime:send"] = {"action": "send", **calls}
    operations["gamma:connectors:{name}:calls:connector:receive"] = {
        "action": "receive", "summary": "A connector service (services/connectors/example) answers each call", **calls}
    operations[f"{keys.DEADLETTER}:send"] = {
        "action": "send",
        "channel": {"$ref": f"#/channels/{keys.DEADLETTER}"},
        "messages": [{"$ref": f"#/channels/{keys.DEADLETTER}/messages/DeadLetter"}],
    }
    return operations


def hand_described() -> dict[str, Any]:
    """Channels FastStream cannot see: dynamic per-session streams and the dead-letter stream."""
    schemas = _schemas([*INBOX_MEMBERS, events.SessionEvent, deadletter.DeadLetter, connectors.ConnectorCall])
    return {"channels": _hand_channels(), "operations": _hand_operations(),
            "components": {"messages": _hand_messages(), "schemas": schemas}}


def _merge(into: dict[str, Any], part: dict[str, Any], where: str) -> None:
    for key, value in part.items():
        if key in into and into[key] != value:
            raise ValueError(f"conflicting definitions of {where}/{key}")
        into[key] = value


def asyncapi(settings: Settings | None = None) -> dict[str, Any]:
    subs = declared_subscriptions()
    doc: dict[str, Any] = {
        "asyncapi": "3.0.0",
        "info": {
            "title": TITLE,
            "version": VERSION,
            "description": "Redis Streams between the five Gamma services (docs/architecture.md \"Streams\"). Service-level "
            "streams carry FastStream's binary envelope (headers incl. the W3C traceparent); per-session "
            "streams are plain XADD with a `data` field (an inbox message names its W3C `traceparent` in its JSON, an "
            "events entry in a `traceparent` field beside `data`). Delivery is at-least-once, handled exactly once "
            "in effect (idempotent by message id / source_id).",
        },
        "defaultContentType": "application/json",
        "servers": {"redis": {"host": "localhost:6379", "protocol": "redis", "description": "REDIS_URL"}},
        "channels": {},
        "operations": {},
        "components": {"messages": {}, "schemas": {}},
    }
    parts = [faststream_spec(service, [s for s in subs if s.service == service]) for service in (*SERVICES, EXTERNAL)]
    parts.append(hand_described())
    for part in parts:
        channels = part.get("channels", {})
        for channel in channels.values():
            # One server for all: FastStream names its own ("development") after the broker URL.
            channel["servers"] = [{"$ref": "#/servers/redis"}]
        _merge(doc["channels"], channels, "channels")
        _merge(doc["operations"], part.get("operations", {}), "operations")
        for section in ("messages", "schemas"):
            _merge(doc["components"][section], part.get("components", {}).get(section, {}), section)
    doc["channels"] = dict(sorted(doc["channels"].items()))
    doc["operations"] = dict(sorted(doc["operations"].items()))
    for section in ("messages", "schemas"):
        doc["components"][section] = dict(sorted(doc["components"][section].items()))
    return doc


def openapi(service: str, settings: Settings | None = None) -> dict[str, Any]:
    module = importlib.import_module(f"services.{service}.app")
    spec: dict[str, Any] = module.create_app(settings or default_settings()).openapi()
    return spec


def render(settings: Settings | None = None) -> dict[str, str]:
    """File name -> content of every document."""
    return {
        "asyncapi.yaml": yaml.safe_dump(asyncapi(settings), sort_keys=False, allow_unicode=True, width=100),
        "openapi.json": json.dumps(openapi("proxy", settings), indent=2) + "\n",
        "openapi-notifications.json": json.dumps(openapi("notifications", settings), indent=2) + "\n",
    }


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs")
    for p in write(target):
        print(p)
    for tag, keep in (("settings", is_deployment), ("tuning", is_tuning)):
        if settings_table.update(OPERATIONS, tag, Settings, keep):
            print(f"{OPERATIONS.relative_to(OPERATIONS.parents[1])} ({tag})")
    if module_map.update():
        print(module_map.PAGE.relative_to(module_map.ROOT))
    if client_types.available():
        client_types.generate(target / "openapi.json", client_types.TYPES)
        print(client_types.TYPES.relative_to(client_types.ROOT))
    else:
        print("node_modules missing (make node): clients/typescript/src/schema.d.ts not regenerated")
