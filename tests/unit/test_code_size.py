"""The project's size limits (README "Code standards"): every file of services/, shared/ and scripted/ at most
MAX_FILE_LINES lines, every function at most MAX_FUNCTION_LINES (its signature to its last line)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
# Files allowed over the limit, each with its reason (none today; docs/architecture.md "Code standards").
FILES_AT_LIMIT: dict[str, int] = {}


def sources() -> list[Path]:
    return sorted(p for d in ("services", "shared", "scripted") for p in (ROOT / d).rglob("*.py"))


def long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_the_sources_are_found() -> None:
    assert len(sources()) > 100


def test_no_file_is_over_the_limit() -> None:
    over = [f"{p.relative_to(ROOT)} ({n} lines)" for p in sources()
            if (n := len(p.read_text().splitlines()))
            > FILES_AT_LIMIT.get(p.relative_to(ROOT).as_posix(), MAX_FILE_LINES)]
    assert not over, "\n".join(over)


def test_no_function_is_over_the_limit() -> None:
    over = [line for p in sources() for line in long_functions(p)]
    assert not over, "\n".join(over)


MAX_FOLDER_MODULES = 15
# docs/architecture.md "Code standards": a folder exempt, with its reason (none today).
FOLDERS_EXEMPT: dict[str, str] = {}


def test_no_folder_is_over_the_limit() -> None:
    """A folder is a wing of at most MAX_FOLDER_MODULES modules (docs/architecture.md "Walking through the
    code"): a new module goes into the wing whose job it shares, or a new wing."""
    over = []
    for init in sorted(p for d in ("services", "shared", "scripted") for p in (ROOT / d).rglob("__init__.py")):
        folder = init.parent.relative_to(ROOT).as_posix()
        count = len([p for p in init.parent.glob("*.py") if p.name != "__init__.py"])
        if count > MAX_FOLDER_MODULES and folder not in FOLDERS_EXEMPT:
            over.append(f"{folder} ({count} modules)")
    assert not over, "\n".join(over)
