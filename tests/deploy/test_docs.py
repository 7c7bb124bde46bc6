"""docs/: the committed interface documents are current (`make docs` regenerates them) and valid by
their own ecosystems' validators (@asyncapi/parser from npm, openapi-spec-validator from PyPI)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from openapi_spec_validator import validate as validate_openapi
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from shared.redis import keys
from tests.deploy.support import ROOT
from tests.support.needs import needs
from tools import docs

DOCS = ROOT / "docs"
NODE = shutil.which("node")
PARSER = ROOT / "node_modules" / "@asyncapi" / "parser"
VALIDATE_JS = Path(__file__).with_name("asyncapi_validate.mjs")
SERVICE_STREAMS = {
    "WAKE": keys.WAKE, "LIFECYCLE": keys.LIFECYCLE, "ARTIFACT_CHANGES": keys.ARTIFACT_CHANGES,
    "INJECTIONS_RECORDED": keys.INJECTIONS_RECORDED, "COMPACTION_REQUESTS": keys.COMPACTION_REQUESTS,
    "NOTIFICATIONS": keys.NOTIFICATIONS, "DIGEST_FLUSH": keys.DIGEST_FLUSH,
}
# docs/architecture.md "Streams": who reads each service-level stream, as (stream, group).
EXPECTED_GROUPS = {
    (keys.WAKE, "runtime"),
    (keys.LIFECYCLE, "notifications"), (keys.LIFECYCLE, "digest"),
    (keys.ARTIFACT_CHANGES, "digest"),
    (keys.INJECTIONS_RECORDED, "notifications"), (keys.INJECTIONS_RECORDED, "digest"),
    (keys.COMPACTION_REQUESTS, "compaction"),
    (keys.DIGEST_FLUSH, "digest"),  # causal order (docs/architecture.md "Causal order"): the runtime asks for a flush now
    (keys.NOTIFICATIONS, "notifications"),
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return docs.render()


@pytest.fixture(scope="module")
def asyncapi(rendered: dict[str, str]) -> dict[str, Any]:
    return yaml.safe_load(rendered["asyncapi.yaml"])


def test_committed_documents_are_current(rendered: dict[str, str]) -> None:
    stale = [name for name, text in rendered.items() if not (DOCS / name).exists() or (DOCS / name).read_text() != text]
    assert not stale, f"run `make docs`: {stale} differ from what the code generates"


def test_documents_do_not_depend_on_the_environment(monkeypatch: pytest.MonkeyPatch, rendered: dict[str, str]) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:1/0")
    monkeypatch.setenv("GAMMA_MAX_BODY_BYTES", "7")
    assert docs.render() == rendered


def test_every_stream_is_documented_with_producers_and_consumers(asyncapi: dict[str, Any]) -> None:
    assert asyncapi["asyncapi"] == "3.0.0"
    by_address: dict[str, set[str]] = {}
    for op in asyncapi["operations"].values():
        channel = asyncapi["channels"][op["channel"]["$ref"].removeprefix("#/channels/")]
        by_address.setdefault(channel["address"], set()).add(op["action"])
    for stream in [*SERVICE_STREAMS.values(), "gamma:{sid}:inbox", "gamma:{sid}:events"]:
        assert by_address.get(stream) == {"send", "receive"}, stream
    assert by_address[keys.DEADLETTER] == {"send"}
    inbox = asyncapi["channels"]["gamma:{sid}:inbox"]
    assert set(inbox["parameters"]) == {"sid"}
    assert set(inbox["messages"]) == {m.__name__ for m in docs.INBOX_MEMBERS}


def test_consumer_groups_come_from_the_services_and_match_the_design(asyncapi: dict[str, Any]) -> None:
    real = {(s.stream, s.group) for s in docs.service_subscriptions()}
    assert real == EXPECTED_GROUPS
    documented = {
        (ch["address"], ch["bindings"]["redis"]["groupName"])
        for ch in asyncapi["channels"].values()
        if ch["bindings"]["redis"].get("method") == "xreadgroup" and "{sid}" not in ch["address"]
    }
    # A connector's call stream is read by the connector service, outside the five (docs/architecture.md "Connectors").
    assert documented == EXPECTED_GROUPS | {("gamma:connectors:{name}:calls", keys.CONNECTOR_GROUP)}


def test_services_subscribe_what_the_topology_declares() -> None:
    """The documents are generated from shared/redis/topology.py; each service's real `create_app` wires
    exactly those subscriptions (stream, group and payload model)."""
    real = sorted((s.service, s.stream, s.group, docs._payload_type(s.model)) for s in docs.service_subscriptions())
    declared = sorted((s.service, s.stream, s.group, docs._payload_type(s.model)) for s in docs.declared_subscriptions())
    assert real == declared and len(real) == len(EXPECTED_GROUPS)


def test_message_payloads_are_the_contract_schemas(asyncapi: dict[str, Any]) -> None:
    schemas = asyncapi["components"]["schemas"]
    for name in ("Wake", "ArtifactChange", "InjectionRecorded", "CompactionRequest", "SessionLive", "UserPrompt",
                 "SessionEvent", "DeadLetter", "NotificationSubmit", "ConnectorCall", "ConnectorResult"):
        assert name in schemas, name
    assert set(schemas["Wake"]["required"]) == {"session_id"}
    refs = re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(asyncapi))
    assert refs and set(refs) <= set(schemas), set(refs) - set(schemas)


def test_documented_producers_really_publish() -> None:
    """Each declared publication names a stream its service's code refers to."""
    names = {v: k for k, v in SERVICE_STREAMS.items()}
    for pub in docs.PUBLICATIONS:
        if pub.service == docs.EXTERNAL:
            continue
        source = "\n".join(p.read_text() for p in (ROOT / "services" / pub.service).rglob("*.py"))
        assert f"keys.{names[pub.stream]}" in source, f"{pub.service} never refers to {pub.stream}"


def run_parser(path: Path) -> tuple[int, dict[str, Any]]:
    assert NODE is not None
    proc = subprocess.run([NODE, str(VALIDATE_JS), str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


@needs(None if NODE and PARSER.exists() else "node or @asyncapi/parser missing (make node)")
def test_asyncapi_parser_accepts_the_document(tmp_path: Path, asyncapi: dict[str, Any]) -> None:
    rc, result = run_parser(DOCS / "asyncapi.yaml")
    assert (rc, result["parsed"], result["version"], result["errors"]) == (0, True, "3.0.0", [])
    # ...and rejects a broken copy, so the check is not vacuous.
    broken = copy.deepcopy(asyncapi)
    next(iter(broken["operations"].values()))["action"] = "publish"
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    rc, result = run_parser(tmp_path / "broken.yaml")
    assert rc == 1 and result["errors"]


@pytest.mark.parametrize("name", ["openapi.json", "openapi-notifications.json"])
def test_openapi_documents_validate(name: str) -> None:
    spec = json.loads((DOCS / name).read_text())
    validate_openapi(spec)
    broken = copy.deepcopy(spec)
    broken["paths"]["/no-slash-here"] = broken["paths"].pop(next(iter(broken["paths"])))
    broken["paths"] = {k.lstrip("/"): v for k, v in broken["paths"].items()}
    with pytest.raises(OpenAPIValidationError):
        validate_openapi(broken)


def test_openapi_covers_the_http_surface() -> None:
    proxy = json.loads((DOCS / "openapi.json").read_text())["paths"]
    for path, method in [
        ("/sessions", "post"), ("/sessions/{sid}", "get"), ("/sessions/{sid}/messages", "post"),
        ("/sessions/{sid}/events", "get"), ("/sessions/{sid}/transcript", "get"), ("/sessions/{sid}/preview", "get"),
        ("/sessions/{sid}/ui", "get"), ("/sessions/{sid}/ui/sync", "post"), ("/sessions/{sid}/suspend", "post"),
        ("/sessions/{sid}/compact", "post"), ("/sessions/{sid}/workspace/files/{path}", "put"),
        ("/sessions/{sid}/documents/{doc}", "patch"),
    ]:
        assert method in proxy.get(path, {}), f"{method.upper()} {path}"
    notifications = json.loads((DOCS / "openapi-notifications.json").read_text())["paths"]
    assert "post" in notifications["/notifications"]
