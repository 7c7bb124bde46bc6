"""Citations of the repository's documents resolve (docs/architecture.md "Code standards"): a comment,
docstring or page that cites `docs/<page>.md "Section"`, `<dir>/README.md "Section"` or `README
"Section"` names a heading of that page or the bold lead of one of its paragraphs (a prefix is enough:
"Delivery" names "Delivery, yield and the idle rules"). The README is short; a section it handed to a
page under docs/ is cited by the README's "Where to read next" table, which quotes its name."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.deploy.support import ROOT

SKIPPED = ("bench/results/", "node_modules/", "tests/golden/", "tests/deploy/test_doc_citations.py")  # its examples
SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml", ".ts", ".js", ".mjs")
# `docs/x.md "Section"`, `services/proxy/README.md, "Section"`, `README "Section"`, across a line break.
CITATION = re.compile(r'((?:[\w./-]+/)?README(?:\.md)?|docs/[\w-]+\.md),?\s+\\?"([A-Z][^"\\]{1,80}?)\\?"')


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in out.split()
            if not name.startswith(SKIPPED) and name.endswith(SUFFIXES) and (ROOT / name).is_file()]


def one_line(text: str) -> str:
    """Whitespace and comment or docstring continuations (`#`, `*`) folded to single spaces."""
    return " ".join(" ".join(re.sub(r"^\s*[#*]?", "", line) for line in text.split("\n")).split()).replace("`", "")


def names(page: Path) -> list[str]:
    text = page.read_text()
    found = [m.group(1).strip().replace("`", "") for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)]
    found += [one_line(m.group(1)).rstrip(".:") for m in re.finditer(r"\*\*([^*]+)\*\*", text)]
    if page.name == "README.md" and page.parent == ROOT:
        found += [m.group(1) for m in re.finditer(r'"([^"\n]+)"', text.partition("## Where to read next")[2])]
    return found


def page_of(cited: str, source: Path) -> Path | None:
    if cited == "README":
        return ROOT / "README.md"
    for base in (ROOT, source.parent):
        if (base / cited).is_file():
            return base / cited
    return None


def dangling(paths: list[Path]) -> list[str]:
    cache: dict[Path, list[str]] = {}
    found = []
    for path in paths:
        text = path.read_text(errors="replace")
        for m in CITATION.finditer(text):
            page, section = page_of(m.group(1), path), one_line(m.group(2))
            if page is None:
                continue
            if page not in cache:
                cache[page] = names(page)
            if not any(name.startswith(section) for name in cache[page]):
                line = text[:m.start()].count("\n") + 1
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                found.append(f"{where}:{line}: {m.group(1)} \"{section}\"")
    return found


def test_every_cited_section_exists() -> None:
    found = dangling(tracked())
    assert not found, "cite a heading (or a paragraph's bold lead) that exists:\n" + "\n".join(found)


def test_a_missing_section_is_found(tmp_path: Path) -> None:
    path = ROOT / "docs" / "architecture.md"
    assert dangling([path]) == []
    source = tmp_path / "m.py"
    source.write_text('"""See docs/architecture.md "No such\n# section" and docs/architecture.md "Delivery,\n  yield"."""\n')
    assert [d.split(": ", 1)[1] for d in dangling([source])] == ['docs/architecture.md "No such section"']
