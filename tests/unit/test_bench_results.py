"""`bench/results` keeps each benchmark's canonical result and the files a document cites, each named
in bench/README.md ("What `bench/results` keeps"); profiles and one-off pairs stay out of the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def named_in_readme() -> set[str]:
    return set(re.findall(r"`([^`/ ]+)`", (ROOT / "bench" / "README.md").read_text()))


def test_every_result_file_is_named_in_the_bench_readme() -> None:
    files = {p.name for p in RESULTS.iterdir() if p.is_file()}
    assert files, "bench/results is empty"
    unnamed = sorted(files - named_in_readme())
    assert not unnamed, f"not named in bench/README.md (a profile or a one-off run?): {unnamed}"


def test_no_profile_is_kept() -> None:
    profiles = sorted(p.name for p in RESULTS.iterdir() if p.suffix == ".folded" or p.name.endswith(".perf.txt"))
    assert not profiles, profiles


def test_every_canonical_result_the_readme_names_exists() -> None:
    table = (ROOT / "bench" / "README.md").read_text().split("## What `bench/results` keeps", 1)[1]
    rows = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    assert "e2e.json" in rows and "stream.json" in rows
    missing = sorted(name for name in rows if not (RESULTS / name).is_file())
    assert not missing, missing
