"""A session's model choice, checked against the catalogue (docs/models.md "Sessions"): on
`POST /sessions` and on a `PATCH` that changes the model. Pure; the proxy answers a refusal with a
422 naming the field and the values the model accepts."""

from __future__ import annotations

from shared.catalogue import Api, Catalogue, Problem, check_config, settle_api
from shared.contracts.http import ModelConfig


class ModelRefused(ValueError):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def settle(requested: ModelConfig, catalogue: Catalogue, default_model: str, default_api: Api) -> ModelConfig:
    """The config a session is created (or changed) with: its API settled once (the request's, else
    `default_api` unless the model needs another: catalogue.settle_api); raises ModelRefused for a
    combination the model rejects. `default_model` is the deployment's (GAMMA_MODEL)."""
    name = requested.name or default_model
    entry = catalogue.resolve(name)
    api = settle_api(entry, requested.api, default_api, requested.reasoning_effort)
    problem = check_config(name, entry, requested.reasoning_effort, api)
    if problem is not None:
        raise ModelRefused(problem)
    return requested.model_copy(update={"api": api})


def changed(current: ModelConfig, patch: ModelConfig, fields: set[str]) -> ModelConfig:
    """`current` with the fields a PATCH names. A new model name without an effort drops the old
    effort (the new model may not take it: it reasons at its own default); an API not named is kept
    where the new model is served on it (`settle`'s `default_api`)."""
    out = current.model_copy(update={"api": patch.api if "api" in fields else None})
    if "name" in fields and patch.name != current.name:
        out = out.model_copy(update={"name": patch.name, "reasoning_effort": None})
    for f in ("reasoning_effort", "context_window"):
        if f in fields:
            out = out.model_copy(update={f: getattr(patch, f)})
    return out
