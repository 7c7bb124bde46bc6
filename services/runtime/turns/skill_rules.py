"""Deterministic skill rules (seed: "Invocation enforcement"): the rule table is data
(`skill_rules.yaml`); this module loads it and checks each prompt's first tool batch.

The check wraps the batch preflight: on the first batch after a new user message (a batch made only
of `message_user` calls is not a task action and does not count), every matching rule whose skill
is neither active nor loaded by that batch fires. The harness then delivers, as one `system_guidance`
(delivery_rules.py `decide`: during a run, steered before the next model call), a trusted guidance
naming the rule and the skill's `gamma.active_skill` messages (the recorder records the activations,
as for `/skill:NAME`). A rule whose skill conflicts with an
active one does not load it. `gamma_skill_rule_total{rule, outcome}` counts fired / followed /
conflict.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, field_validator

from services.runtime.engine.types import PrepareBatch, ToolOutcome
from services.runtime.skillset.skills import Skill, SkillError, resolve_activation
from services.runtime.turns.turn_order import active_skill_message
from shared.contracts.records.injection import InjectionKind
from shared.contracts.records.messages import AgentMessage, CustomMessage, ToolCall, UserMessage
from shared.trust.trusted_blocks import render

RULES_FILE = Path(__file__).with_name("skill_rules.yaml")
_COUNTERS: dict[CollectorRegistry, Counter] = {}


class SkillRule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    skill: str
    why: str
    pattern: str
    unless: str | None = None

    @field_validator("pattern", "unless")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)
        return value

    def matches(self, prompt: str) -> bool:
        if self.unless and re.search(self.unless, prompt, re.IGNORECASE):
            return False
        return re.search(self.pattern, prompt, re.IGNORECASE) is not None


@cache
def load_rules(path: Path = RULES_FILE) -> tuple[SkillRule, ...]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return tuple(SkillRule.model_validate(r) for r in data.get("rules", []))


def check_rules(rules: tuple[SkillRule, ...], skills: Mapping[str, Skill]) -> None:
    """At load: every rule names a skill of the catalog."""
    for r in rules:
        if r.skill not in skills:
            raise SkillError(f"rule {r.id!r} requires unknown skill {r.skill!r}", file=str(RULES_FILE))


def rule_counter(registry: CollectorRegistry) -> Counter:
    if registry not in _COUNTERS:
        _COUNTERS[registry] = Counter("gamma_skill_rule", "Deterministic skill rules checked at a prompt's first "
                                      "tool batch, by outcome (fired: the harness loaded the skill)",
                                      ["rule", "outcome"], registry=registry)
    return _COUNTERS[registry]


def guidance(rule: SkillRule) -> CustomMessage:
    return CustomMessage(
        custom_type="gamma.system_guidance", display=False,
        content=render("system_guidance", None,
                       f"The harness loaded the {rule.skill} skill: {rule.why}, and your first tool batch did not "
                       "load it. Its body follows. Follow it from its first step, and check against it whatever "
                       "you already did for this request."),
        details={"trusted": True, "injectionType": "system_guidance", "source": "system", "reason": "skill_rule",
                 "rule": rule.id, "skill": rule.skill})


class SkillRuleGuard:
    """Wraps a session's batch preflight; `inject` delivers messages as one injection of a kind
    (pending_queue.py `inject`, where delivery_rules.py `decide` says)."""

    def __init__(self, inner: PrepareBatch, rules: tuple[SkillRule, ...], skills: Mapping[str, Skill],
                 messages: Callable[[], list[AgentMessage]], scope: Callable[[list[str]], set[str]],
                 inject: Callable[[InjectionKind, list[AgentMessage]], object],
                 registry: CollectorRegistry | None) -> None:
        self.inner = inner
        self.rules = rules
        self.skills = skills
        self.messages = messages
        self.scope = scope  # names -> the live skills they are checked against (skill_lifecycle.py)
        self.inject = inject
        self.registry = registry
        self._checked: tuple[str, int] | None = None  # the prompt whose first batch was checked

    async def prepare_batch(self, calls: list[ToolCall]) -> dict[str, ToolOutcome]:
        preset = await self.inner(calls)
        if not all(c.name == "message_user" for c in calls):
            self.check(calls)
        return preset

    def check(self, calls: list[ToolCall]) -> list[str]:
        """The rules that fired for this batch (none unless it is its prompt's first task batch)."""
        prompt = next((m for m in reversed(self.messages()) if isinstance(m, UserMessage)), None)
        if prompt is None or (prompt.content, prompt.timestamp) == self._checked:
            return []
        self._checked = (prompt.content, prompt.timestamp)
        loading = {str(c.arguments.get("name")) for c in calls if c.name == "skill"}
        fired: list[str] = []
        for rule in (r for r in self.rules if r.matches(prompt.content)):
            active = self.scope([rule.skill, *loading])
            if rule.skill in active or rule.skill in loading:
                self._count(rule, "followed")
                continue
            try:
                to_load = resolve_activation([rule.skill], self.skills, active | loading)
            except SkillError:
                self._count(rule, "conflict")
                continue
            self.inject("system_guidance", [guidance(rule), *(
                active_skill_message(s, None if s.name == rule.skill else rule.skill) for s in to_load)])
            self._count(rule, "fired")
            fired.append(rule.id)
        return fired

    def _count(self, rule: SkillRule, outcome: str) -> None:
        if self.registry is not None:
            rule_counter(self.registry).labels(rule=rule.id, outcome=outcome).inc()
