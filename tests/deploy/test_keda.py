"""deploy/k8s/components/keda-runtime: the prod overlay with the component renders with `kubectl
kustomize` (kubectl from the venv: tests/deploy/support.py); the KEDA objects validate against KEDA's published CRD schemas offline (the validators and
types of @kubernetes-models/keda, generated from them: values by its validators, unknown fields by tsc's
excess-property check), every other object strictly with kubernetes-validate; the trigger watches the
stream and consumer group shared/redis/topology.py gives the runtime, and KEDA's HPA replaces the base one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shared.redis import keys
from shared.redis.topology import CONSUMPTIONS, group_of
from tests.deploy.support import KUBECTL_MISSING, ROOT, kustomize
from tests.support.needs import needs

NODE = shutil.which("node")
MODELS = ROOT / "node_modules" / "@kubernetes-models" / "keda"
TSC = ROOT / "node_modules" / "typescript" / "bin" / "tsc"
VALIDATE_JS = Path(__file__).with_name("keda_validate.mjs")
COMPONENT = ROOT / "deploy" / "k8s" / "components" / "keda-runtime"
pytestmark = [needs(KUBECTL_MISSING),
              needs(None if NODE and MODELS.exists() and TSC.exists() else "node or node_modules missing (make node)")]
Doc = dict[str, Any]
TS_TYPES = {"ScaledObject": "IScaledObject", "TriggerAuthentication": "ITriggerAuthentication"}


def render(tmp: Path, with_component: bool) -> list[Doc]:
    """The prod overlay, with the component added by an overlay of its own (as a deployer would)."""
    overlay = tmp / "overlay"
    overlay.mkdir(exist_ok=True)
    to_repo = os.path.relpath(ROOT, overlay)
    kustomization: Doc = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                          "namespace": "gamma", "resources": [f"{to_repo}/deploy/k8s/overlays/prod"]}
    if with_component:
        kustomization["components"] = [f"{to_repo}/deploy/k8s/components/keda-runtime"]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return kustomize(overlay)


def keda_errors(tmp: Path, docs: list[Doc]) -> list[Doc]:
    assert NODE is not None
    path = tmp / "keda.json"
    path.write_text(json.dumps(docs))
    proc = subprocess.run([NODE, str(VALIDATE_JS), str(path)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    result: Doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["checked"] == len(docs)
    errors: list[Doc] = result["errors"]
    return errors


def excess_fields(tmp: Path, docs: list[Doc]) -> str:
    """tsc's excess-property check of each object as a literal of its KEDA type: '' when none."""
    assert NODE is not None
    lines = [f'import type {{ {TS_TYPES[d["kind"]]} }} from "@kubernetes-models/keda/keda.sh/v1alpha1/{d["kind"]}";'
             for d in docs]
    lines += [f"export const o{i}: {TS_TYPES[d['kind']]} = {json.dumps(d)};" for i, d in enumerate(docs)]
    (tmp / "objects.ts").write_text("\n".join(lines) + "\n")
    config = {"compilerOptions": {"strict": True, "noEmit": True, "module": "nodenext", "moduleResolution": "nodenext",
                                  "skipLibCheck": True, "typeRoots": [],
                                  "paths": {"@kubernetes-models/*": [str(ROOT / "node_modules" / "@kubernetes-models" / "*")]}},
              "files": ["objects.ts"]}
    (tmp / "tsconfig.json").write_text(json.dumps(config))
    proc = subprocess.run([NODE, str(TSC), "-p", str(tmp / "tsconfig.json")], capture_output=True, text=True,
                          timeout=120)
    return "" if proc.returncode == 0 else proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    return render(tmp_path_factory.mktemp("keda"), with_component=True)


def keda_objects(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["apiVersion"].startswith("keda.sh/")]


def test_keda_objects_validate_against_the_crd_schemas(rendered: list[Doc], tmp_path: Path) -> None:
    objects = keda_objects(rendered)
    assert sorted(d["kind"] for d in objects) == ["ScaledObject", "TriggerAuthentication"]
    assert keda_errors(tmp_path, objects) == []
    assert excess_fields(tmp_path, objects) == ""


def test_the_validators_reject_broken_objects(rendered: list[Doc], tmp_path: Path) -> None:
    """Guards against a vacuous check: a wrong type, a missing required field, a misspelt field."""
    (scaled,) = [d for d in rendered if d["kind"] == "ScaledObject"]
    wrong_type = {**scaled, "spec": {**scaled["spec"], "maxReplicaCount": "ten"}}
    no_triggers = {**scaled, "spec": {k: v for k, v in scaled["spec"].items() if k != "triggers"}}
    assert len(keda_errors(tmp_path, [wrong_type, no_triggers])) == 2
    misspelt = {**scaled, "spec": {**scaled["spec"], "minReplicas": 2}}
    assert "minReplicas" in excess_fields(tmp_path, [misspelt])


def test_other_objects_validate_strictly(rendered: list[Doc]) -> None:
    for doc in rendered:
        if not doc["apiVersion"].startswith("keda.sh/"):
            kubernetes_validate.validate(doc, "1.32.0", strict=True)


def test_scales_the_runtime_on_its_wake_group_lag_with_cpu_beside(rendered: list[Doc]) -> None:
    (scaled,) = [d for d in rendered if d["kind"] == "ScaledObject"]
    assert scaled["metadata"]["namespace"] == "gamma"
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gamma-runtime"}
    assert scaled["spec"]["minReplicaCount"] >= 1
    streams = [t for t in scaled["spec"]["triggers"] if t["type"] == "redis-streams"]
    assert [(t["metadata"]["stream"], t["metadata"]["consumerGroup"]) for t in streams] == [
        (keys.WAKE, group_of("runtime"))]
    assert any(c.service == "runtime" and c.stream == keys.WAKE for c in CONSUMPTIONS)
    assert int(streams[0]["metadata"]["lagCount"]) > 0
    (auth,) = [d for d in rendered if d["kind"] == "TriggerAuthentication"]
    assert streams[0]["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert {t["type"] for t in scaled["spec"]["triggers"]} >= {"cpu", "memory"}


def test_keda_owns_the_runtime_hpa_only_when_enabled(rendered: list[Doc], tmp_path: Path) -> None:
    assert [d for d in rendered if d["kind"] == "HorizontalPodAutoscaler"] == []
    default = render(tmp_path, with_component=False)
    assert keda_objects(default) == []
    (hpa,) = [d for d in default if d["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "gamma-runtime"
