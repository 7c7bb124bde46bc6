"""The deployment runs the agent-command sandbox (README "Security"): the image installs bubblewrap, the runtime's
Kubernetes pod and compose service may create bwrap's user namespace (and nothing else is loosened),
the prod overlay offers a gVisor RuntimeClass, CI installs bubblewrap."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.support import KUBECTL_MISSING, ROOT, kustomize
from tests.deploy.test_dockerfile import DOCKERFILE, parse
from tests.support.needs import needs

needs_kubectl = needs(KUBECTL_MISSING)
K8S_VERSIONS = ("1.28.0", "1.32.0", kubernetes_validate.utils.latest_version() + ".0")
APPARMOR = "container.apparmor.security.beta.kubernetes.io/runtime"


def render(path: Path, *extra: str) -> list[dict[str, Any]]:
    return kustomize(path, *extra)


def deployment(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name)


def test_the_image_installs_bubblewrap_as_root_before_dropping_to_the_service_user() -> None:
    final = parse(DOCKERFILE.read_text())[1][-1]
    runs = final.args("RUN")
    assert any("apt-get install" in r and "bubblewrap" in r.split() and "rm -rf /var/lib/apt/lists" in r
               for r in runs), runs


@needs_kubectl
@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_runtime_pod_may_create_bwraps_user_namespace_and_nothing_more(overlay: str) -> None:
    docs = render(ROOT / "deploy" / "k8s" / "overlays" / overlay)
    runtime = deployment(docs, "gamma-runtime")
    pod = runtime["spec"]["template"]
    assert pod["metadata"]["annotations"][APPARMOR] == "unconfined"
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["seccompProfile"] == {"type": "Unconfined"}
    # Still a non-root, capability-less, read-only container: only the user-namespace refusal is lifted.
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["readOnlyRootFilesystem"] is True and "privileged" not in sc
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    for other in ("gamma-proxy", "gamma-notifications", "gamma-digest", "gamma-compaction"):
        spec = deployment(docs, other)["spec"]["template"]
        assert APPARMOR not in (spec["metadata"].get("annotations") or {})
        assert "seccompProfile" not in spec["spec"]["containers"][0].get("securityContext", {})


@needs_kubectl
def test_prod_offers_a_gvisor_runtime_class_for_the_runtime(tmp_path: Path) -> None:
    prod = render(ROOT / "deploy" / "k8s" / "overlays" / "prod")
    (rc,) = [d for d in prod if d["kind"] == "RuntimeClass"]
    assert rc["metadata"]["name"] == "gvisor" and rc["handler"] == "runsc" and "namespace" not in rc["metadata"]
    assert "runtimeClassName" not in deployment(prod, "gamma-runtime")["spec"]["template"]["spec"]  # an option
    overlay = tmp_path / "prod-gvisor"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "deploy" / "k8s" / "overlays" / "prod", overlay)],
        "components": [os.path.relpath(ROOT / "deploy" / "k8s" / "components" / "gvisor-runtime", overlay)]}))
    docs = render(overlay, "--load-restrictor=LoadRestrictionsNone")
    assert deployment(docs, "gamma-runtime")["spec"]["template"]["spec"]["runtimeClassName"] == "gvisor"
    assert "runtimeClassName" not in deployment(docs, "gamma-proxy")["spec"]["template"]["spec"]
    for version in K8S_VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)


def test_compose_lets_only_the_runtime_create_user_namespaces() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert set(services["runtime"]["security_opt"]) == {"seccomp=unconfined", "apparmor=unconfined"}
    for name, svc in services.items():
        if name != "runtime":
            assert "security_opt" not in svc and not svc.get("privileged"), name
    assert not services["runtime"].get("privileged") and "cap_add" not in services["runtime"]


def test_ci_installs_bubblewrap() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert "want+=(bubblewrap)" in script and 'apt_install "${want[@]}"' in script
