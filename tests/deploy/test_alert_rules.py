"""deploy/prometheus/gamma-alerts.yaml: a Prometheus rule file of the documented shape, whose every
metric and label is one the runtime exports (its registry, as /metrics serves it), so a renamed
metric or label cannot leave an alert that never fires."""

from __future__ import annotations

import re
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from services.runtime.hosting.model_calls import ModelMetrics
from services.runtime.model.cache_watch import REASONS
from shared.telemetry.metrics import for_registry
from tests.deploy.support import ROOT

RULES = ROOT / "deploy" / "prometheus" / "gamma-alerts.yaml"
DURATION = re.compile(r"^\d+[smhd]$")
FUNCTIONS = {"sum", "rate", "increase", "clamp_min", "by", "on", "group_left", "without"}


def exported() -> dict[str, set[str]]:
    """Metric sample names the runtime exports, with their labels."""
    registry = CollectorRegistry()
    for_registry(registry)
    ModelMetrics.of(registry)
    out: dict[str, set[str]] = {}
    for family in registry.collect():
        names = {family.name, f"{family.name}_total"} if family.type == "counter" else {family.name}
        labels = {label for sample in family.samples for label in sample.labels}
        labels |= set(getattr(registry._names_to_collectors.get(family.name), "_labelnames", ()))
        for n in names:
            out[n] = labels
    return out


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    assert set(doc) == {"groups"}
    return [r for g in doc["groups"] for r in g["rules"]]


def test_rules_have_the_documented_shape() -> None:
    found = rules()
    assert {r["alert"] for r in found} == {"GammaPromptCacheBreaking", "GammaPromptPrefixDiverging"}
    for r in found:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}
        assert DURATION.match(r["for"]) and r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        assert r["expr"].count("(") == r["expr"].count(")") and r["expr"].count("{") == r["expr"].count("}")


def test_every_metric_and_label_is_exported() -> None:
    metrics = exported()
    assert metrics["gamma_model_cache_miss_tokens_total"] == {"family", "variant", "reason"}
    for r in rules():
        expr = r["expr"]
        for name, selector in re.findall(r"(gamma_[a-z_]+)(\{[^}]*\})?", expr):
            assert name in metrics, f"{r['alert']}: {name} is not exported"
            for label in re.findall(r"([a-z_]+)\s*(?:=~|!=|!~|=)", selector):
                assert label in metrics[name], f"{r['alert']}: {name} has no label {label}"
        for group in re.findall(r"by \(([^)]*)\)", expr):
            for label in (x.strip() for x in group.split(",")):
                assert label in metrics["gamma_model_cache_miss_tokens_total"], label
        for word in re.findall(r"([a-z_]+)\s*\(", expr):
            assert word in FUNCTIONS or word in metrics, word
        for reason in re.findall(r'reason[!=~]+"([^"]+)"', expr):
            assert set(reason.split("|")) <= set(REASONS), reason
