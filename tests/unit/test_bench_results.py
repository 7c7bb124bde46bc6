"""`bench/results` keeps each benchmark's canonical result, each a row of the table in bench/README.md
("What `bench/results` keeps"); profiles and one-off pairs stay out of the repository. A file is kept
only by its table row: naming it elsewhere in the README (prose quoting a one-off run) does not keep it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
SECTION = "## What `bench/results` keeps"


def table_rows(readme: str) -> list[str]:
    """The file names of the section's table: its `| `name` | ... |` rows, up to the next heading."""
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, re.M)


def canonical() -> list[str]:
    return table_rows((ROOT / "bench" / "README.md").read_text())


def test_every_result_file_is_a_row_of_the_readme_table() -> None:
    files = {p.name for p in RESULTS.iterdir() if p.is_file()}
    assert files, "bench/results is empty"
    unnamed = sorted(files - set(canonical()))
    assert not unnamed, f"not a row of bench/README.md's table (a profile or a one-off run?): {unnamed}"


def test_a_name_in_prose_or_another_section_is_not_a_row() -> None:
    readme = (f"{SECTION}\n\nPrefer `e2e.json` over a pair such as `e2e.pair.json`.\n\n| file | written by |\n"
              "|---|---|\n| `e2e.json` | bench-e2e |\n\n## bench-e2e\n\n| `e2e.other.json` | a table elsewhere |\n")
    assert table_rows(readme) == ["e2e.json"]


def test_no_profile_is_kept() -> None:
    profiles = sorted(p.name for p in RESULTS.iterdir() if p.suffix == ".folded" or p.name.endswith(".perf.txt"))
    assert not profiles, profiles


def test_every_canonical_result_the_readme_names_exists() -> None:
    rows = canonical()
    assert "e2e.json" in rows and "stream.json" in rows
    missing = sorted(name for name in rows if not (RESULTS / name).is_file())
    assert not missing, missing
