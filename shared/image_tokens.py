"""Image tokens by OpenAI's published formulas (the vision guide's "Calculating costs"), so the
context budget counts an image as the model bills it. Two schemes, per model family:

- tiles (GPT-4o, GPT-4.1, GPT-5 class, o-series): `low` costs the base; otherwise the image is fitted
  in 2048 x 2048, its short side brought down to 768, and each 512-px tile costs `per_tile`:
  base + tiles x per_tile;
- patches (GPT-4.1-mini/nano, GPT-5-mini/nano, o4-mini): 32-px patches, capped at 1536 (the image
  scaled down to fit the cap), times the model's multiplier.

`auto` is counted as `high`: the budget errs on the side of compacting early.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Detail = Literal["auto", "low", "high"]


@dataclass(frozen=True)
class TileRule:
    base: int
    per_tile: int


@dataclass(frozen=True)
class PatchRule:
    multiplier: float
    cap: int = 1536


Rule = TileRule | PatchRule

# Model name prefixes, the most specific first (the first match wins).
RULES: tuple[tuple[str, Rule], ...] = (
    ("gpt-4.1-mini", PatchRule(1.62)),
    ("gpt-4.1-nano", PatchRule(2.46)),
    ("gpt-5-mini", PatchRule(1.62)),
    ("gpt-5-nano", PatchRule(2.46)),
    ("o4-mini", PatchRule(1.72)),
    ("gpt-4o-mini", TileRule(2833, 5667)),
    ("o1", TileRule(75, 150)),
    ("o3", TileRule(75, 150)),
    ("computer-use", TileRule(65, 129)),
)
DEFAULT_RULE: Rule = TileRule(85, 170)  # GPT-4o, GPT-4.1, GPT-5 and any model not listed


def rule_for(model: str) -> Rule:
    name = model.lower()
    return next((rule for prefix, rule in RULES if name.startswith(prefix)), DEFAULT_RULE)


def tile_tokens(width: int, height: int, detail: Detail, rule: TileRule) -> int:
    if detail == "low":
        return rule.base
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return rule.base + rule.per_tile * math.ceil(w / 512) * math.ceil(h / 512)


def patch_tokens(width: int, height: int, rule: PatchRule) -> int:
    patches = math.ceil(width / 32) * math.ceil(height / 32)
    if patches > rule.cap:
        shrink = math.sqrt(32 * 32 * rule.cap / (width * height))
        shrink *= min(math.floor(width * shrink / 32) / (width * shrink / 32),
                      math.floor(height * shrink / 32) / (height * shrink / 32))
        patches = min(rule.cap, math.ceil(width * shrink / 32) * math.ceil(height * shrink / 32))
    return math.ceil(patches * rule.multiplier)


def image_tokens(width: int, height: int, detail: Detail = "auto", model: str = "") -> int:
    rule = rule_for(model)
    if isinstance(rule, PatchRule):
        return patch_tokens(width, height, rule)
    return tile_tokens(width, height, detail, rule)
