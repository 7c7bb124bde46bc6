"""Only shared/trust/trusted_blocks.py formats a reserved tag (docs/architecture.md "Trust boundaries").

Every string literal in the production packages is scanned with the reserved-tag pattern (docstrings
aside: they describe blocks, the model never reads them), and so is every f-string or concatenation
that puts a computed name after `<` or `</`. The builder itself and the pattern's definition are the
only modules allowed (the scripted model, a test double that plays a model writing whatever it is
told, lives outside the production packages).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from shared.trust.reserved_tags import TAG_RULE

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shared", "services", "tools")
# The builder; the tag pattern's own definition.
ALLOWED = {"shared/trust/trusted_blocks.py", "shared/trust/reserved_tags.py"}
OPEN_END = re.compile(r"<\s*/?\s*$")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def offences(source: str) -> list[str]:
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found += [f"line {node.lineno}: {m.group()!r}" for m in TAG_RULE.finditer(node.value)]
        elif isinstance(node, ast.JoinedStr):
            for a, b in zip(node.values, node.values[1:], strict=False):
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and OPEN_END.search(a.value) \
                        and isinstance(b, ast.FormattedValue):
                    found.append(f"line {node.lineno}: a computed tag name in an f-string")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.left, ast.Constant) \
                and isinstance(node.left.value, str) and OPEN_END.search(node.left.value):
            found.append(f"line {node.lineno}: a computed tag name in a concatenation")
    return found


def test_no_module_but_the_builder_formats_a_reserved_tag() -> None:
    bad = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in ALLOWED and (found := offences(path.read_text())):
                bad[rel] = found
    assert not bad, f"format reserved tags with shared/trust/trusted_blocks.py only: {bad}"


def test_the_scan_sees_each_way_of_formatting_a_tag() -> None:
    assert offences('x = "<system_note>"') and offences('x = "</ Summary >"')
    assert offences('x = f"<{kind}>"') and offences('x = "</" + kind')
    assert not offences('"""A docstring about <system_note>."""\nx = "<div>"')
