"""Comments point inside the repository (README "Code standards"): no comment, docstring or document
cites a tracker's issue number (the repository holds no tracker; a rule is explained by a section of
docs/architecture.md, docs/integration.md or a README), and no code comment narrates the code's
history (the git log keeps it; HISTORY lists the phrases)."""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"\bissues? #?[0-9]+\b", re.IGNORECASE)
HISTORY = re.compile(r"\bas before\b|\bused to\b|\bpreviously\b|\b(before|since) (issue|the fix|the change)\b",
                     re.IGNORECASE)
# Measurements and their write-ups name the baselines they were taken against.
SKIPPED = ("bench/results/", "node_modules/")
TEXT_SUFFIXES = (".md", ".js", ".css", ".html", ".toml", ".yaml", ".yml", ".sh", ".mjs", ".ts", ".json")


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in out.split() if not name.startswith(SKIPPED)]


def python_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring."""
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.append((first.lineno, first.value.value))
    return found


@functools.cache
def comments_in(path: Path) -> list[tuple[int, str]]:
    """A file's comments, tokenized and parsed once for both tests (most of their time)."""
    return python_comments(path.read_text())


def offences(path: Path, pattern: re.Pattern[str], code_only: bool) -> list[str]:
    rel = path.relative_to(ROOT)
    if path.suffix == ".py":
        return [f"{rel}:{line}" for line, text in comments_in(path) if pattern.search(text)]
    if code_only or not (path.suffix in TEXT_SUFFIXES or path.name in ("Makefile", "Dockerfile", "run")):
        return []
    return [f"{rel}:{n}" for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if pattern.search(line)]


def test_the_sources_are_found() -> None:
    assert sum(1 for p in tracked() if p.suffix == ".py") > 300


def test_no_issue_number_is_cited() -> None:
    found = [o for p in tracked() if p.is_file() for o in offences(p, CITATION, code_only=False)]
    assert not found, "cite the docs section that explains the rule instead:\n" + "\n".join(found)


def test_no_code_comment_narrates_history() -> None:
    found = [o for p in tracked() if p.is_file() for o in offences(p, HISTORY, code_only=True)]
    assert not found, "describe the code as it is (the git log keeps its history):\n" + "\n".join(found)


def test_the_patterns_catch_what_they_are_for() -> None:
    source = 'def f() -> None:\n    """The cap (issue 23)."""\n    x = "issue 4"  # as before\n'
    texts = [text for _, text in python_comments(source)]
    assert any(CITATION.search(t) for t in texts) and any(HISTORY.search(t) for t in texts)
    assert not any(CITATION.search(t) for t in texts if "issue 4" in t)  # a string literal is not a comment
