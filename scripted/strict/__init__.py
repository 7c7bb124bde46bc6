"""The strict model-API double: the real API's rules (reference `openai-api-rules.md`), enforced on every
request the scripted model serves (scripted/transport.py), in switchable groups (GAMMA_SCRIPTED_STRICT).

- rules.py: the per-family rule table (the double's own, the oracle: never the harness's catalogue);
- requests.py: a request checked against the table, once per request;
- sdk_types.py: a request checked against the `openai` package's own param types;
- replies.py: reasoning items, usage variants, error and summary events in the API's shapes;
- failures.py: the failure scripts (`script:` step fields).
"""

from __future__ import annotations

from dataclasses import dataclass

# Rule groups, each switchable (scripted/README.md "Strictness"):
# reasoning: store/reasoning/encrypted-content/phase/summaries (reference §1);
# params: per-model parameter support, output caps, wrong-API shapes, nulls, images, cache fields (§2.1/2.2);
# context: the context window (§2.3, §4.1); roles: message roles (§2.2);
# pairing: tool calls and their outputs; models: unknown models, Responses-only models on Chat (§2.1);
# sdk: the body against the `openai` package's own param types.
GROUPS = ("reasoning", "params", "context", "roles", "pairing", "models", "sdk")


@dataclass(frozen=True)
class Strictness:
    groups: frozenset[str] = frozenset(GROUPS)
    # reference §1.3: newer API docs say encrypted_content comes back without `include`; off = the legacy rule
    encrypted_by_default: bool = False

    @classmethod
    def parse(cls, value: str, encrypted_by_default: bool = False) -> Strictness:
        """`on` (every group), `off` (none), or a comma-separated list of groups (`-group` removes one from all)."""
        words = [w.strip() for w in value.split(",") if w.strip()]
        if words == ["on"]:
            return cls(frozenset(GROUPS), encrypted_by_default)
        if words in (["off"], []):
            return cls(frozenset(), encrypted_by_default)
        removed = {w[1:] for w in words if w.startswith("-")}
        added = {w for w in words if not w.startswith("-")}
        unknown = (removed | added) - set(GROUPS)
        if unknown:
            raise ValueError(f"GAMMA_SCRIPTED_STRICT: unknown groups {sorted(unknown)} (known: {', '.join(GROUPS)})")
        base = added if added else set(GROUPS)
        return cls(frozenset(base - removed), encrypted_by_default)

    def on(self, group: str) -> bool:
        return group in self.groups

    def __sub__(self, group: str) -> Strictness:
        return Strictness(self.groups - {group}, self.encrypted_by_default)


OFF = Strictness(frozenset())
