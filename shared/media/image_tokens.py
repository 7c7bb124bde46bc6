"""Image tokens by OpenAI's published formulas (the vision guide's "Calculating costs"), so the
context budget counts an image as the model bills it. Two schemes, per model family:

- tiles (GPT-4o, GPT-4.1, GPT-5, o1/o3): `low` costs the base; otherwise the image is fitted in
  2048 x 2048, its short side brought down to 768, and each 512-px tile costs `per_tile`:
  base + tiles x per_tile (GPT-4o 85 + 170, GPT-5 70 + 140);
- patches (GPT-4.1-mini/nano, GPT-5-mini/nano, o4-mini): 32-px patches, capped at 1536 (the image
  scaled down to fit the cap), times the model's multiplier.

`auto` is counted as `high`: the budget errs on the side of compacting early.
"""

from __future__ import annotations

import math
import re
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

# Model names (a match at the start), the most specific first: the first match wins. The vision guide's
# tables: patches for GPT-4.1-mini/nano, GPT-5-mini/nano (and their point releases) and o4-mini;
# tiles for GPT-5 and GPT-5-chat (70 + 140 per tile), GPT-4o-mini, o1/o3 and computer-use.
RULES: tuple[tuple[re.Pattern[str], Rule], ...] = tuple((re.compile(pattern), rule) for pattern, rule in (
    (r"gpt-4\.1-mini", PatchRule(1.62)),
    (r"gpt-4\.1-nano", PatchRule(2.46)),
    (r"gpt-5(\.\d+)?-mini", PatchRule(1.62)),
    (r"gpt-5(\.\d+)?-nano", PatchRule(2.46)),
    (r"o4-mini", PatchRule(1.72)),
    (r"gpt-5", TileRule(70, 140)),
    (r"gpt-4o-mini", TileRule(2833, 5667)),
    (r"o1", TileRule(75, 150)),
    (r"o3", TileRule(75, 150)),
    (r"computer-use", TileRule(65, 129)),
))
DEFAULT_RULE: Rule = TileRule(85, 170)  # GPT-4o, GPT-4.1, GPT-4.5 and any model not listed


def rule_for(model: str) -> Rule:
    name = model.lower()
    return next((rule for pattern, rule in RULES if pattern.match(name)), DEFAULT_RULE)


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
