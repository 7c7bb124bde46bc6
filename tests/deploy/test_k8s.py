"""deploy/k8s: each overlay renders with `kubectl kustomize` (kubectl from the venv: tests/deploy/support.py)
and every object validates (strict) with kubernetes-validate against the Kubernetes versions we support;
then the shape deploy/README.md describes."""

from __future__ import annotations

import base64
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.support import (
    GAMMA_SERVICES,
    KUBECTL_MISSING,
    ROOT,
    entry_point_service,
    kustomize,
    setting_env_names,
)
from tests.support.needs import needs

pytestmark = needs(KUBECTL_MISSING)
OVERLAYS = ("dev", "prod")
# The oldest Kubernetes we support, a middle one, and the newest schemas kubernetes-validate bundles.
K8S_VERSIONS = ("1.28.0", "1.32.0", kubernetes_validate.utils.latest_version() + ".0")
DISK_OWNERS = {"proxy", "runtime", "digest", "compaction"}

Doc = dict[str, Any]


def render(overlay: str) -> list[Doc]:
    return kustomize(ROOT / "deploy" / "k8s" / "overlays" / overlay)


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[Doc]]:
    return request.param, render(request.param)


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def by_component(docs: list[Doc], kind: str) -> dict[str, Doc]:
    """Gamma objects by service name (`gamma-runtime` -> `runtime`)."""
    return {
        d["metadata"]["name"].removeprefix("gamma-"): d
        for d in of_kind(docs, kind)
        if d["metadata"]["name"].removeprefix("gamma-") in GAMMA_SERVICES
    }


def test_every_object_validates_strictly(rendered: tuple[str, list[Doc]]) -> None:
    _, docs = rendered
    for version in K8S_VERSIONS:
        for doc in docs:
            # Raises ValidationError on a bad field and SchemaNotFoundError on an unknown kind.
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_rejects_a_broken_deployment(rendered: tuple[str, list[Doc]]) -> None:
    """Guards against a vacuous check: a misspelt field under strict, a wrong type without."""
    deployment = of_kind(rendered[1], "Deployment")[0]
    misspelt = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, "1.32.0", strict=True)
    wrong_type = {**deployment, "spec": {**deployment["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, "1.32.0")


def test_deployments_services_pvc_hpa_pdb(rendered: tuple[str, list[Doc]]) -> None:
    _, docs = rendered
    assert set(by_component(docs, "Deployment")) == GAMMA_SERVICES
    assert set(by_component(docs, "Service")) >= GAMMA_SERVICES
    (pvc,) = of_kind(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    (hpa,) = of_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gamma-runtime"}
    assert hpa["spec"]["minReplicas"] >= 1 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    pdb_targets = {p["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for p in of_kind(docs, "PodDisruptionBudget")}
    assert pdb_targets == {f"gamma-{s}" for s in GAMMA_SERVICES}


def container(deployment: Doc) -> Doc:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def test_pods_probes_resources_and_commands(rendered: tuple[str, list[Doc]]) -> None:
    _, docs = rendered
    services = by_component(docs, "Service")
    for name, deployment in by_component(docs, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        c = container(deployment)
        assert entry_point_service(c["command"]) == name
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
        assert c["resources"]["limits"]["memory"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        port = c["ports"][0]["containerPort"]
        assert services[name]["spec"]["ports"][0]["port"] == port
        assert services[name]["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        assert ("/data" in mounts) == (name in DISK_OWNERS), name
        if name == "compaction":
            assert mounts["/data"]["readOnly"] is True
        claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        assert claims == ({"gamma-sessions"} if name in DISK_OWNERS else set())


def test_settings_come_from_the_configmap_and_secrets(rendered: tuple[str, list[Doc]]) -> None:
    overlay, docs = rendered
    known = setting_env_names()
    (config,) = of_kind(docs, "ConfigMap")
    assert set(config["data"]) <= known, set(config["data"]) - known
    assert config["data"]["GAMMA_HOST"] == "0.0.0.0" and config["data"]["GAMMA_DATA_DIR"] == "/data"
    secrets_used = set()
    for deployment in by_component(docs, "Deployment").values():
        c = container(deployment)
        assert c["envFrom"] == [{"configMapRef": {"name": config["metadata"]["name"]}}]
        env = {e["name"]: e for e in c["env"]}
        assert set(env) <= known, set(env) - known
        assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"]["key"] == "url"
        for e in env.values():
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                secrets_used.add((ref["name"].rsplit("-", 1)[0] if overlay == "dev" else ref["name"], ref["key"]))
        assert "value" not in env.get("OPENAI_API_KEY", {}), "secrets only by reference"
    assert {("gamma-secrets", "OPENAI_API_KEY"), ("gamma-secrets", "GAMMA_API_TOKENS"),
            ("gamma-secrets", "GAMMA_SERVICE_TOKEN"), ("gamma-redis", "url")} <= secrets_used


def test_runtime_shutdown_is_long_enough_to_persist(rendered: tuple[str, list[Doc]]) -> None:
    runtime = by_component(rendered[1], "Deployment")["runtime"]
    # uvicorn's graceful shutdown (20 s) + broker drain (15 s) + persisting each live session.
    assert runtime["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 60


def test_network_policy_admits_outside_traffic_only_to_proxy_and_notifications(rendered: tuple[str, list[Doc]]) -> None:
    _, docs = rendered
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(docs, "NetworkPolicy")}
    deny = policies["gamma-default-deny-ingress"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress"] and "ingress" not in deny
    public = policies["gamma-public-ingress"]
    (expr,) = public["podSelector"]["matchExpressions"]
    assert expr["key"] == "app.kubernetes.io/component" and set(expr["values"]) == {"proxy", "notifications"}
    assert all("from" not in rule for rule in public["ingress"]), "public = any source"
    internal = policies["gamma-internal-ingress"]
    for rule in internal["ingress"]:
        for peer in rule["from"]:
            # Only Gamma pods, or the monitoring namespace (the internal services' http port, the
            # public ones' metrics port).
            assert peer.get("podSelector") == {"matchLabels": {"app.kubernetes.io/part-of": "gamma"}} or (
                "namespaceSelector" in peer
                and rule["ports"] == [{"port": "http", "protocol": "TCP"}, {"port": "metrics", "protocol": "TCP"}]
            )
    # The public services' /metrics is scraped on their internal port, which no Service exposes.
    services = by_component(docs, "Service")
    for name, deployment in by_component(docs, "Deployment").items():
        ports = {p["name"]: p["containerPort"] for p in container(deployment)["ports"]}
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        if name in ("proxy", "notifications"):
            assert int(annotations["prometheus.io/port"]) == ports["metrics"] != ports["http"]
            assert ports["metrics"] not in {p["port"] for p in services[name]["spec"]["ports"]}
        else:
            assert int(annotations["prometheus.io/port"]) == ports["http"]
    # Every pod the internal policy covers carries the part-of label, so nothing else is admitted.
    for workload in of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet"):
        assert workload["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gamma"


def test_dev_runs_redis_in_cluster_with_aof() -> None:
    docs = render("dev")
    (redis,) = of_kind(docs, "StatefulSet")
    c = redis["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][c["command"].index("--appendonly") + 1] == "yes"
    assert any(m["mountPath"] == "/data" for m in c["volumeMounts"])
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "redis-data"
    services = {s["metadata"]["name"] for s in of_kind(docs, "Service")}
    secrets = {s["metadata"]["name"].rsplit("-", 1)[0]: s for s in of_kind(docs, "Secret")}
    url = base64.b64decode(secrets["gamma-redis"]["data"]["url"]).decode()
    host = url.split("//")[1].split(":")[0]
    assert host in services, f"REDIS_URL points at {host}, not an in-cluster Service"


def test_prod_uses_external_redis_and_more_replicas() -> None:
    docs = render("prod")
    assert not of_kind(docs, "StatefulSet"), "no in-cluster Redis in prod"
    assert not of_kind(docs, "Secret"), "prod secrets are created out of band, never rendered from git"
    deployments = by_component(docs, "Deployment")
    assert all(d["spec"]["replicas"] >= 2 for d in deployments.values())
    (hpa,) = of_kind(docs, "HorizontalPodAutoscaler")
    dev_hpa = of_kind(render("dev"), "HorizontalPodAutoscaler")[0]
    assert hpa["spec"]["minReplicas"] > dev_hpa["spec"]["minReplicas"]
    for d in deployments.values():
        env = {e["name"]: e for e in container(d)["env"]}
        assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == "gamma-redis"


def test_prod_documents_a_redis_cluster_url_the_services_accept() -> None:
    """The prod overlay's example cluster URL is one the services take (db 0), a cluster URL with
    another db is refused at start-up, and the WAIT setting it sets is a real one."""
    from shared.redis.redis_cluster import cluster_url

    text = (ROOT / "deploy" / "k8s" / "overlays" / "prod" / "kustomization.yaml").read_text()
    examples = [line.split()[-1] for line in text.splitlines() if line.startswith("#   rediss://")]
    assert examples, "the overlay shows a Redis Cluster URL"
    for url in examples:
        assert cluster_url(url) == url.rsplit("/", 1)[0]
        with pytest.raises(ValueError, match="only db 0"):
            cluster_url(url.rsplit("/", 1)[0] + "/3")
    (config,) = [c for c in of_kind(render("prod"), "ConfigMap") if c["metadata"]["name"].startswith("gamma-config")]
    assert config["data"]["GAMMA_REDIS_WAIT_MS"] == "250"
    assert {"GAMMA_REDIS_CLUSTER", "GAMMA_REDIS_WAIT_MS"} <= setting_env_names()
