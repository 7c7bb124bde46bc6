"""A skill's own files, readable by path (prompts/skills.txt: "A relative path inside a skill resolves
against that skill's directory"). `read` of `skills/NAME/PATH` opens the file PATH of the catalog's
skill NAME; a relative PATH that no workspace file has opens the file of the active skill that has it.
Read-only: `write` and `edit` refuse `skills/NAME/...` (the skills are the deployment's, shared by
every session; a session's own copy goes under another path). Nothing resolves outside the skill's
directory: no absolute path, no `..`, no link that leads out (the resolved path must stay beneath it).

Pure functions over the skills directory (services/runtime/skillset/paths.py) and the catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from services.runtime.skillset.skills import Skill

PREFIX = "skills/"


def normalised(rel: str) -> str:
    return rel.strip().removeprefix("./")


def named(rel: str, skills: Mapping[str, Skill]) -> tuple[str, str] | None:
    """`skills/NAME/PATH` of a skill in the catalog → (NAME, PATH); anything else → None."""
    rel = normalised(rel)
    if not rel.startswith(PREFIX):
        return None
    name, _, rest = rel[len(PREFIX):].partition("/")
    return (name, rest) if name in skills else None


def beneath(directory: Path, rel: str) -> Path | None:
    """The regular file `rel` names beneath `directory`, or None (absent, or it would leave it)."""
    if not rel or "\x00" in rel or "\\" in rel:
        return None
    path = PurePosixPath(rel)
    if path.is_absolute() or ".." in path.parts:
        return None
    base = directory.resolve()
    real = base.joinpath(*path.parts).resolve()
    return real if real.is_relative_to(base) and real.is_file() else None


def find(root: Path, rel: str, skills: Mapping[str, Skill], active: Iterable[str]) -> tuple[str, Path] | str:
    """(skill, file) for a read, or the reason there is none. `skills/NAME/PATH` first; else `rel` in
    each active skill's directory, which must be one skill only (two: name one)."""
    hit = named(rel, skills)
    if hit is not None:
        name, inner = hit
        found = beneath(root / name, inner)
        return (name, found) if found is not None else f"No such file in the {name} skill: {inner or '(a directory)'}"
    rel = normalised(rel)
    hits = [(n, f) for n in sorted(set(active)) if n in skills and (f := beneath(root / n, rel)) is not None]
    if len(hits) == 1:
        return hits[0]
    if hits:
        return f"{rel} is a file of several active skills; name one: " + ", ".join(f"{PREFIX}{n}/{rel}" for n, _ in hits)
    return f"No such file: {rel}"


def refusal(rel: str, skills: Mapping[str, Skill]) -> str | None:
    """The error a write or an edit of a skill's file gets (None: not a skill's path)."""
    hit = named(rel, skills)
    if hit is None:
        return None
    return (f"Not written: {normalised(rel)} is a file of the {hit[0]} skill, and skills are read-only. Write your "
            "own copy under another workspace path.")
