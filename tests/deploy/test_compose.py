"""docker-compose.yml: valid against the Compose specification's JSON Schema and consistent with the code.

The schema is vendored (schemas/compose-spec.json, see schemas/README.md); validation uses the
draft it declares (2019-09).
"""

from __future__ import annotations

import copy
import importlib
import json
import re
from typing import Any

import jsonschema
import pytest
import yaml

from shared.mcp.connector_acl import acl_rules, user_name
from tests.deploy.support import GAMMA_SERVICES, ROOT, entry_point_service, setting_env_names

COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
SCHEMA = ROOT / "tests" / "deploy" / "schemas" / "compose-spec.json"
# Services that own a slice of the session disk (docs/architecture.md "Ownership: one writer per slice");
# notifications keeps everything in Redis. Compaction reads transcripts only.
DISK_OWNERS = {"proxy", "runtime", "digest", "compaction"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA.read_text())
    assert schema["title"] == "Compose Specification"
    jsonschema.Draft201909Validator.check_schema(schema)
    return jsonschema.Draft201909Validator(schema)


def test_compose_file_matches_the_compose_spec(compose: dict[str, Any], validator: jsonschema.protocols.Validator) -> None:
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c["services"]["proxy"].__setitem__("helthcheck", {"test": ["CMD", "true"]}),
        lambda c: c["services"]["proxy"]["depends_on"]["redis"].__setitem__("condition", "service_ready"),
        lambda c: c["services"]["redis"].__setitem__("ports", [{"published": "x", "target": "not-a-port"}]),
        lambda c: c.__setitem__("service", {}),
    ],
    ids=["misspelt-key", "bad-condition", "bad-port", "unknown-top-level"],
)
def test_the_schema_rejects_broken_variants(compose: dict[str, Any], validator: jsonschema.protocols.Validator, mutate: Any) -> None:
    """Guards against a vacuous schema: each mutation of the real file must be reported."""
    broken = copy.deepcopy(compose)
    mutate(broken)
    assert list(validator.iter_errors(broken)), "the schema accepted a broken compose file"


CONNECTOR = "connectors"  # the example connector (services/connectors/example), outside the five


def gamma(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: svc for name, svc in compose["services"].items()
            if name not in ("redis", CONNECTOR) and "profiles" not in svc}


def test_the_five_services_the_example_connector_and_redis(compose: dict[str, Any]) -> None:
    default = {name for name, svc in compose["services"].items() if "profiles" not in svc}
    assert default == GAMMA_SERVICES | {"redis", CONNECTOR}


def test_the_example_connector_registers_with_notifications_over_the_network(compose: dict[str, Any]) -> None:
    svc = compose["services"][CONNECTOR]
    assert svc["command"] == ["python", "-m", "services.connectors.example"]
    main = importlib.import_module("services.connectors.example.__main__")
    assert callable(main.main)
    assert svc["image"] == compose["services"]["proxy"]["image"]
    assert svc["environment"]["GAMMA_NOTIFICATIONS_URL"] == "http://notifications:8001"
    assert svc["environment"]["GAMMA_HOST"] == "0.0.0.0" and "ports" not in svc
    assert svc["depends_on"]["notifications"] == {"condition": "service_healthy"}


def test_the_example_connector_gets_only_its_own_environment_and_redis_user(compose: dict[str, Any]) -> None:
    """No env_file, no model key, no shared Redis credential: its own ACL user (shared/mcp/connector_acl.py)."""
    svc = compose["services"][CONNECTOR]
    assert "env_file" not in svc and "<<" not in svc
    assert set(svc["environment"]) == {"REDIS_URL", "GAMMA_HOST", "GAMMA_SERVICE_TOKEN", "GAMMA_NOTIFICATIONS_URL"}
    assert set(svc["environment"]) <= setting_env_names()
    assert svc["environment"]["REDIS_URL"].startswith("redis://connector-brand:${GAMMA_CONNECTOR_REDIS_PASSWORD")
    command = compose["services"]["redis"]["command"]
    at = command.index("--user")
    user = command[at + 1:]
    assert user[0] == user_name("brand") and user[1:-1] == acl_rules("brand")
    assert user[-1].startswith(">${GAMMA_CONNECTOR_REDIS_PASSWORD")


def test_every_command_is_a_real_entry_point_of_its_service(compose: dict[str, Any]) -> None:
    for name, svc in gamma(compose).items():
        assert entry_point_service(svc["command"]) == name
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
    assert len({svc["image"] for svc in gamma(compose).values()}) == 1, "one image for all five"


def test_redis_persists_with_aof_on_a_volume(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    volume = redis["volumes"][0].split(":")
    assert volume[1] == "/data" and volume[0] in compose["volumes"]


def test_healthchecks_everywhere_and_ordered_startup(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        if "profiles" in svc:
            continue  # the cluster trial: test_the_cluster_profile_starts_six_cluster_nodes_and_joins_them
        test = svc["healthcheck"]["test"]
        assert test[0] == "CMD", name
        if name != "redis":
            assert test[1:3] == ["python", "/app/deploy/healthcheck.py"], name
            assert test[3] == name, "the probe asks the service it runs in"
            assert test[4] in ("/healthz", "/readyz")
            assert "redis" in svc["depends_on"], name
        for dep, cond in svc.get("depends_on", {}).items():
            assert cond == {"condition": "service_healthy"}, f"{name} -> {dep}"
    # A service whose compose healthcheck is /readyz must not wait on the proxy: the stack-wide
    # /readyz of notifications and proxy needs every heartbeat, so a cycle would never start.
    assert "proxy" not in {d for svc in compose["services"].values() for d in svc.get("depends_on", {})}
    assert compose["services"]["notifications"]["healthcheck"]["test"][4] == "/healthz"


def test_session_disk_is_one_named_volume_on_its_owners(compose: dict[str, Any]) -> None:
    mounted: dict[str, str] = {}
    for name, svc in gamma(compose).items():
        for spec in svc.get("volumes", []):
            source, target, *mode = spec.split(":")
            assert target == "/data"
            mounted[name] = source
            assert mode == (["ro"] if name == "compaction" else [])
    assert set(mounted) == DISK_OWNERS
    assert len(set(mounted.values())) == 1 and next(iter(mounted.values())) in compose["volumes"]
    for svc in gamma(compose).values():
        assert svc["environment"]["GAMMA_DATA_DIR"] == "/data"


def test_only_the_proxy_and_notification_ports_are_published(compose: dict[str, Any]) -> None:
    published = {name: svc["ports"] for name, svc in compose["services"].items() if "ports" in svc}
    assert published == {"proxy": ["8000:8000"], "notifications": ["8001:8001"]}


def env_example_names() -> set[str]:
    """Assignments in .env.example, including the commented-out optional ones (`# NAME=value`)."""
    names = set()
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=", line)
        if match:
            names.add(match.group(1))
    return names


def test_every_env_var_is_a_real_setting(compose: dict[str, Any]) -> None:
    known = setting_env_names()
    from_example = env_example_names()
    assert from_example, ".env.example sets nothing"
    assert from_example <= known, from_example - known
    for name, svc in gamma(compose).items():
        assert svc["env_file"] == [".env.example"], name
        env = svc["environment"]
        assert set(env) <= known, set(env) - known
        assert env["GAMMA_HOST"] == "0.0.0.0", "containers must listen beyond loopback"
        assert env["REDIS_URL"] == "${GAMMA_COMPOSE_REDIS_URL:-redis://redis:6379/0}", "the single Redis by default"


def test_runtime_gets_time_to_persist_live_sessions(compose: dict[str, Any]) -> None:
    grace = compose["services"]["runtime"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) >= 30


CLUSTER_NODES = {f"redis-cluster-{i}" for i in range(1, 7)}


def test_the_cluster_profile_starts_six_cluster_nodes_and_joins_them(compose: dict[str, Any]) -> None:
    profiled = {name: svc for name, svc in compose["services"].items() if "profiles" in svc}
    assert set(profiled) == CLUSTER_NODES | {"redis-cluster-init"}
    assert all(svc["profiles"] == ["cluster"] for svc in profiled.values())
    for name in CLUSTER_NODES:
        command = profiled[name]["command"]
        assert command[0] == "redis-server"
        assert command[command.index("--cluster-enabled") + 1] == "yes"
        assert "ports" not in profiled[name], "the trial cluster stays inside the compose network"
        assert profiled[name]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    init = profiled["redis-cluster-init"]
    script = init["command"][-1]
    assert "--cluster create" in script and "--cluster-replicas 1" in script and "--cluster-yes" in script
    assert "cluster_state:ok" in script
    assert all("redis-cluster-$$i" in script or n in script for n in CLUSTER_NODES)
    assert {n: c["condition"] for n, c in init["depends_on"].items()} == dict.fromkeys(CLUSTER_NODES, "service_healthy")
    # The services reach it by an override of the default URL (any node names the cluster).
    for svc in gamma(compose).values():
        assert "GAMMA_COMPOSE_REDIS_URL" in svc["environment"]["REDIS_URL"]
