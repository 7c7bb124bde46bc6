"""The static prefix pinned byte for byte: each variant's system prompt and the stable tool schemas
(what every session of the variant sends first, and the provider caches) are rendered and compared
with `tests/golden/prefix/`. Any change to a prompt file, a skill body or a tool's schema fails here;
the diff of the golden files is the review. `GAMMA_UPDATE_GOLDEN=1` rewrites them (commit the diff),
along with `tokens.json`, the tokens of each variant (`shared/tokens.py`'s encoding)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from services.runtime.prompt import VARIANTS, Variant, build_system_prompt
from services.runtime.skills import load_skills
from services.runtime.tools import Toolset
from shared.tokens import count_text_tokens, encoding_name

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "prefix"
UPDATE = os.environ.get("GAMMA_UPDATE_GOLDEN") == "1"


def rendered(variant: Variant) -> str:
    prompt = build_system_prompt(variant, load_skills(REPO / "skills"))
    tools = [t.schema() for t in Toolset(None).tools]  # type: ignore[arg-type]
    return prompt + "\n===== tools (in order) =====\n" + json.dumps(tools, ensure_ascii=False, indent=1) + "\n"


def check(path: Path, text: str) -> None:
    if UPDATE:
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path.name} missing: run with GAMMA_UPDATE_GOLDEN=1 and commit it"
    assert path.read_text(encoding="utf-8") == text, (
        f"the static prefix changed ({path.name}): review the change, then GAMMA_UPDATE_GOLDEN=1 and commit the diff")


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variants_prefix_is_pinned(variant: Variant) -> None:
    check(GOLDEN / f"{variant}.txt", rendered(variant))


def test_tokens_per_variant_are_reported() -> None:
    golden = GOLDEN / "tokens.json"
    if not UPDATE and golden.exists() and json.loads(golden.read_text())["encoding"] != encoding_name():
        pytest.skip("counted with another encoding (shared/tokens.py loads o200k_base only where it can)")
    table = {"encoding": encoding_name(),
             "variants": {v: {"system_prompt_and_tools": count_text_tokens(rendered(v))} for v in VARIANTS}}
    check(golden, json.dumps(table, indent=1) + "\n")
