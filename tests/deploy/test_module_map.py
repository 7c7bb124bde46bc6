"""docs/architecture.md's module map and import-layers table are generated from the code
(tools/module_map.py, `make docs`): a module added, moved or described differently, or an import contract
changed, without regenerating fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.deploy.support import ROOT
from tools.module_map import PACKAGES, PAGE, layers, module_map, rendered, summary


def test_the_committed_map_and_layers_are_the_generated_ones() -> None:
    text = PAGE.read_text()
    assert rendered(text) == text, "docs/architecture.md: run `make docs` (python -m tools.docs docs)"


def test_every_runtime_proxy_and_shared_module_has_a_row() -> None:
    text = module_map()
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            assert f"| `{path.name}` | {summary(path)} |" in text, path


def test_every_import_contract_has_a_row() -> None:
    text = layers()
    assert "| shared is below services | forbidden |" in text
    assert text.count("\n") == 2 + (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")


def test_a_new_module_is_drift(tmp_path: Path) -> None:
    for top in PACKAGES:
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    text = PAGE.read_text()
    assert rendered(text, tmp_path) == text
    (tmp_path / "services/runtime/newcomer.py").write_text('"""A module the map does not list yet."""\n')
    assert "`newcomer.py` | A module the map does not list yet." in rendered(text, tmp_path)
    assert rendered(text, tmp_path) != text


def test_a_long_docstring_is_cut_at_a_word(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('"""' + "word | " * 60 + '\n\nSecond paragraph."""\n')
    line = summary(path)
    assert line.endswith(" …") and len(line) <= 162 and "Second" not in line and "\\|" in line
