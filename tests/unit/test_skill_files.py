"""A skill's own files, read by path (services/runtime/skillset/skill_files.py): `skills/NAME/PATH`, a relative
path of an active skill, never a path out of the skill's directory, never writable."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.runtime.skillset import skill_files
from services.runtime.skillset.skills import Skill, load_skills

REPO = Path(__file__).resolve().parents[2]
SKILLS = load_skills(REPO / "skills")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A copy of two skills' directories, with a link that leads out of one."""
    base = tmp_path / "skills"
    for name in ("import", "deck-generation"):
        (base / name).mkdir(parents=True)
        for f in (REPO / "skills" / name).iterdir():
            if f.is_file():
                (base / name / f.name).write_bytes(f.read_bytes())
    (tmp_path / "secret.txt").write_text("not a skill file")
    (base / "import" / "out.txt").symlink_to(tmp_path / "secret.txt")
    return base


def found(result: tuple[str, Path] | str) -> tuple[str, str]:
    assert not isinstance(result, str), result
    return result[0], result[1].name


def test_a_named_skill_file_is_found(root: Path) -> None:
    assert found(skill_files.find(root, "skills/import/checklist.yaml", SKILLS, [])) == ("import", "checklist.yaml")
    assert found(skill_files.find(root, "./skills/import/SKILL.md", SKILLS, [])) == ("import", "SKILL.md")


def test_a_relative_path_resolves_against_the_active_skill(root: Path) -> None:
    assert found(skill_files.find(root, "checklist.yaml", SKILLS, ["import"])) == ("import", "checklist.yaml")
    assert skill_files.find(root, "checklist.yaml", SKILLS, []) == "No such file: checklist.yaml"
    two = skill_files.find(root, "checklist.yaml", SKILLS, ["import", "deck-generation"])
    assert isinstance(two, str) and "skills/deck-generation/checklist.yaml" in two and "skills/import/checklist.yaml" in two


@pytest.mark.parametrize("path", [
    "skills/import/../deck-generation/SKILL.md", "skills/import/../../secret.txt", "skills/import//etc/passwd",
    "skills/import/out.txt", "skills/import/", "skills/import/scripts\\..\\SKILL.md", "skills/import/a\x00b",
])
def test_nothing_resolves_out_of_the_skills_directory(root: Path, path: str) -> None:
    result = skill_files.find(root, path, SKILLS, ["import"])
    assert isinstance(result, str) and result.startswith("No such file"), result


@pytest.mark.parametrize("path", ["../secret.txt", "/etc/passwd", "out.txt"])
def test_a_relative_path_cannot_escape_either(root: Path, path: str) -> None:
    assert isinstance(skill_files.find(root, path, SKILLS, ["import"]), str)


def test_skill_files_are_read_only() -> None:
    refused = skill_files.refusal("skills/import/checklist.yaml", SKILLS)
    assert refused is not None and "read-only" in refused and "import" in refused
    assert skill_files.refusal("skills/not-a-skill/x.txt", SKILLS) is None  # a workspace folder of that name
    assert skill_files.refusal("brief.xml", SKILLS) is None


def test_unknown_skill_names_are_workspace_paths() -> None:
    catalog: dict[str, Skill] = dict(SKILLS)
    assert skill_files.named("skills/ghost/SKILL.md", catalog) is None
    assert skill_files.named("skills/import/SKILL.md", catalog) == ("import", "SKILL.md")
