"""The model catalogue (docs/models.md): per model, what a request may carry and what it costs.

`Catalogue.resolve(name)` finds a model's entry by its exact name, as a dated snapshot of an exact
name (`gpt-5-mini-2025-08-07` -> gpt-5-mini), or as an Azure deployment mapped to one
(GAMMA_AZURE_DEPLOYMENTS); never by prefix. A name it does not know gets the file's `unknown`
entry, the documented safe default. GAMMA_MODEL_CATALOGUE_EXTRA adds models or overrides known ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from shared.catalogue.schema import EFFORTS, Api, Capabilities, CatalogueFile, Effort, Entry, Prices

__all__ = ["DATED", "EFFORTS", "Api", "Capabilities", "Catalogue", "Effort", "Entry", "Prices", "Problem", "catalogue",
           "check_config", "parse_deployments", "parse_extra", "settle_api"]

FILE = Path(__file__).with_name("models.yaml")
DATED = re.compile(r"^(?P<base>.+)-\d{4}-\d{2}-\d{2}$")  # OpenAI's dated snapshot suffix
MAX_EXTRA = 100


class ExtraModel(BaseModel):
    """One GAMMA_MODEL_CATALOGUE_EXTRA entry: `like` a known model (else the unknown default), with
    capability overrides and prices."""

    model_config = ConfigDict(extra="forbid")
    like: str | None = Field(None, max_length=200)
    caps: dict[str, Any] = Field(default_factory=dict)
    prices: Prices | None = None


_EXTRA: TypeAdapter[dict[str, ExtraModel]] = TypeAdapter(dict[str, ExtraModel])
_DEPLOYMENTS: TypeAdapter[dict[str, str]] = TypeAdapter(dict[str, str])


def _names_ok(table: Mapping[str, object], what: str) -> None:
    if len(table) > MAX_EXTRA or any(not k.strip() or len(k) > 200 for k in table):
        raise ValueError(f"{what}: at most {MAX_EXTRA} entries, each a non-empty name of at most 200 characters")


def parse_extra(raw: str) -> dict[str, ExtraModel]:
    if not raw.strip():
        return {}
    extra = _EXTRA.validate_python(json.loads(raw))
    _names_ok(extra, "GAMMA_MODEL_CATALOGUE_EXTRA")
    return extra


def parse_deployments(raw: str) -> dict[str, str]:
    if not raw.strip():
        return {}
    table = _DEPLOYMENTS.validate_python(json.loads(raw))
    _names_ok(table, "GAMMA_AZURE_DEPLOYMENTS")
    return table


class Catalogue:
    def __init__(self, entries: dict[str, Entry], unknown: Capabilities,
                 deployments: Mapping[str, str] | None = None) -> None:
        self.entries = entries  # exact names and listed snapshots -> entry
        self.unknown = unknown
        self.deployments = dict(deployments or {})

    @classmethod
    def load(cls, extra: str = "", deployments: str = "") -> Catalogue:
        base = _base()
        entries = dict(base.entries)
        for name, spec in parse_extra(extra).items():
            like = base.lookup(spec.like) if spec.like else None
            if spec.like and like is None:
                raise ValueError(f"GAMMA_MODEL_CATALOGUE_EXTRA: {name!r} is like {spec.like!r}, which the catalogue "
                                 "does not know")
            caps = Capabilities.model_validate({**(like.caps if like else base.unknown).model_dump(), **spec.caps})
            entries[name] = Entry(name=name, family=like.family if like else None, caps=caps,
                                  prices=spec.prices or (like.prices if like else None),
                                  source="GAMMA_MODEL_CATALOGUE_EXTRA")
        return cls(entries, base.unknown, parse_deployments(deployments))

    def lookup(self, name: str) -> Entry | None:
        """The entry of an exact name or of a dated snapshot of one; None when unknown."""
        hit = self.entries.get(name)
        if hit is None and (m := DATED.match(name)):
            hit = self.entries.get(m["base"])
        return hit

    def resolve(self, name: str) -> Entry:
        """`name` as sent on the wire (an Azure deployment maps to its base model first)."""
        hit = self.lookup(self.deployments.get(name, name))
        return hit if hit is not None else Entry(name=None, family=None, caps=self.unknown)


@lru_cache(maxsize=1)
def _base() -> Catalogue:
    raw = CatalogueFile.model_validate(yaml.safe_load(FILE.read_text(encoding="utf-8")))
    unknown = Capabilities.model_validate({k: v for k, v in raw.unknown.items() if k != "source"})
    entries: dict[str, Entry] = {}
    for fname, family in raw.families.items():
        for name, spec in family.models.items():
            caps = Capabilities.model_validate({**unknown.model_dump(), **family.caps, **spec.caps})
            entry = Entry(name=name, family=fname, caps=caps, prices=spec.prices, source=family.source)
            for n in (name, *spec.snapshots):
                entries[n] = entry
    return Catalogue(entries, unknown)


@lru_cache(maxsize=16)
def catalogue(extra: str = "", deployments: str = "") -> Catalogue:
    """The catalogue for these settings' raw values (built once per pair)."""
    return Catalogue.load(extra, deployments)


@dataclass(frozen=True)
class Problem:
    """A session model config the model would refuse: the field, why, and the values it accepts."""

    field: str
    message: str
    allowed: tuple[str, ...]

    def detail(self) -> dict[str, Any]:
        return {"field": self.field, "allowed": list(self.allowed), "message": self.message}


def check_config(model: str, entry: Entry, effort: Effort | None, api: Api) -> Problem | None:
    """The first reason `model` would refuse this effort on this API (reference §2.1), or None."""
    caps = entry.caps
    if api not in caps.apis:
        return Problem("model.api", f"{model} is not served on the {api} API", caps.apis)
    if effort is not None and effort not in caps.efforts:
        why = "takes no reasoning effort" if not caps.efforts else f"does not accept reasoning effort {effort!r}"
        if not entry.known:
            why += " (an unknown model: describe it in GAMMA_MODEL_CATALOGUE_EXTRA)"
        return Problem("model.reasoning_effort", f"{model} {why}", caps.efforts)
    # No effort sent: the Chat body asks for `none` itself (model/chat_api.py `chat_effort`).
    if api == "chat" and caps.chat_tools_need_effort_none and effort not in (None, "none"):
        return Problem("model.reasoning_effort", f"{model} takes function tools on Chat Completions only with "
                       "reasoning effort 'none'; use api 'responses' for another effort", ("none",))
    return None


def settle_api(entry: Entry, requested: Api | None, default: Api, effort: Effort | None) -> Api:
    """The API of a new session: the one asked for; else the deployment's default unless the model
    is not served there, or (Chat from gpt-5.4 on) would refuse the harness's function tools at
    the effort it reasons at (docs/models.md "Which API")."""
    caps = entry.caps
    if requested is not None:
        return requested
    if default not in caps.apis:
        return caps.apis[0]
    if default == "chat" and caps.chat_tools_need_effort_none and caps.effective_effort(effort) not in (None, "none") \
            and "responses" in caps.apis:
        return "responses"
    return default
