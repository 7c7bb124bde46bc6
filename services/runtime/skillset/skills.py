"""Skill loader: `skills/<name>/SKILL.md` as Agent Skills files with Gamma's typed manifest.

Every skill stays a valid Agent Skills skill (agentskills.io) so the same files load in Claude Code,
Codex and Pi. Gamma's manifest fields that the spec has no key for (`type`, `conflictsWith`,
`requiresSkills`, `precedenceOver`) live in the spec's free-form `metadata` map as strings, the way
`allowed-tools` lists names: space-separated.

Precedence (seed: "Each skill manifest can declare conflicts and precedence"): `metadata.precedence-over`
names skills this one wins against when they conflict. The harness resolves such a conflict before the
task runs (the outranked workflow's contract ends, services/runtime/skillset/skill_lifecycle.py; an outranked
skill requested in the same batch is not activated); only a conflict that no manifest ranks is refused
for the agent to ask the user.

Everything here is pure: loading reads files once, the rest works on the returned mapping.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from shared.trust.trusted_blocks import element, fragment, lines, render
from shared.ui.checklist import Checklist, parse_checklist

SkillType = Literal["workflow", "reference"]
SKILL_TYPES: tuple[SkillType, ...] = ("workflow", "reference")
SKILL_FILE = "SKILL.md"

# The Agent Skills spec's top-level keys; anything else makes other harnesses reject the skill.
ALLOWED_KEYS = frozenset({"name", "description", "license", "compatibility", "allowed-tools", "metadata"})
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
# Lowercase ASCII words joined by single hyphens: no leading, trailing or double hyphens.
NAME_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# Pi's explicit invocation: `/skill:NAME` optionally followed by arguments.
COMMAND_RE = re.compile(r"/skill:(\S+)(?:\s+(.*))?", re.DOTALL)
FRONTMATTER_RE = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)


class SkillError(ValueError):
    """A malformed skill or skill set; the message names the file and the field."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        where = ": ".join(p for p in (file, f"field '{field}'" if field else None) if p)
        super().__init__(f"{where}: {message}" if where else message)


class UnknownSkill(SkillError):
    """A requested or referenced skill name is not in the catalog."""


class SkillConflict(SkillError):
    """The set of active + requested + required skills contains a declared conflict."""


class SkillManifest(BaseModel):
    """Gamma's skill manifest (`type`, `conflictsWith`, `requiresSkills` besides the spec's keys), typed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    type: SkillType
    description: str
    conflicts_with: list[str] = []
    requires_skills: list[str] = []
    precedence_over: list[str] = []  # conflicting skills this one wins against
    # `metadata.checklist`: a YAML file beside SKILL.md with the audited steps (shared/ui/checklist.py).
    checklist: Checklist | None = None


class Skill(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    manifest: SkillManifest
    body: str  # markdown after the frontmatter
    path: str  # relative to the skills directory's parent, e.g. skills/deck-generation/SKILL.md

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def type(self) -> SkillType:
        return self.manifest.type


# ---------------------------------------------------------------- parsing


def split_frontmatter(text: str, file: str) -> tuple[dict[str, Any], str]:
    """YAML frontmatter mapping and the body after it."""
    text = text.removeprefix("\ufeff")
    match = FRONTMATTER_RE.match(text)
    if match is None:
        raise SkillError("no YAML frontmatter: the file must start with a '---' block", file=file,
                         field="frontmatter")
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise SkillError(f"invalid YAML: {exc}", file=file, field="frontmatter") from exc
    if not isinstance(data, dict):
        raise SkillError("must be a YAML mapping", file=file, field="frontmatter")
    return data, text[match.end():].lstrip("\r\n")


def _names(value: Any, file: str, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, str):
        raise SkillError("must be a string of space-separated skill names", file=file, field=field)
    names = value.split()
    for n in names:
        if not NAME_RE.fullmatch(n):
            raise SkillError(f"{n!r} is not a valid skill name", file=file, field=field)
    if len(set(names)) != len(names):
        raise SkillError("lists a skill twice", file=file, field=field)
    return names


def _optional_str(data: dict[str, Any], key: str, file: str) -> None:
    if key in data and not isinstance(data[key], str):
        raise SkillError("must be a string", file=file, field=key)


def _relations(metadata: dict[str, str], name: str, file: str) -> tuple[list[str], list[str], list[str]]:
    """`metadata.conflicts-with`, `requires-skills` and `precedence-over`, each a list of names."""
    conflicts = _names(metadata.get("conflicts-with"), file, "metadata.conflicts-with")
    requires = _names(metadata.get("requires-skills"), file, "metadata.requires-skills")
    over = _names(metadata.get("precedence-over"), file, "metadata.precedence-over")
    for field, names in (("metadata.conflicts-with", conflicts), ("metadata.requires-skills", requires),
                         ("metadata.precedence-over", over)):
        if name in names:
            raise SkillError("a skill cannot name itself", file=file, field=field)
    both = sorted(set(conflicts) & set(requires))
    if both:
        raise SkillError(f"{', '.join(both)} both required and conflicting", file=file,
                         field="metadata.conflicts-with")

    return conflicts, requires, over


def parse_manifest(data: dict[str, Any], dir_name: str, file: str) -> SkillManifest:
    """Validate the frontmatter against the Agent Skills spec plus Gamma's metadata keys."""
    unknown = sorted(str(k) for k in data if k not in ALLOWED_KEYS)
    if unknown:
        raise SkillError(
            f"unknown top-level key(s) {', '.join(unknown)}; the Agent Skills spec allows only "
            f"{', '.join(sorted(ALLOWED_KEYS))} (put Gamma fields in metadata)",
            file=file, field=unknown[0],
        )

    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise SkillError("required, a non-empty string", file=file, field="name")
    if len(name) > MAX_NAME:
        raise SkillError(f"at most {MAX_NAME} characters, got {len(name)}", file=file, field="name")
    if not NAME_RE.fullmatch(name):
        raise SkillError(
            f"{name!r} must be lowercase letters, digits and single hyphens, "
            "not starting or ending with a hyphen", file=file, field="name",
        )
    if name != dir_name:
        raise SkillError(f"{name!r} must equal its directory name {dir_name!r}", file=file, field="name")

    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("required, a non-empty string (the trigger condition)", file=file,
                         field="description")
    if len(description) > MAX_DESCRIPTION:
        raise SkillError(f"at most {MAX_DESCRIPTION} characters, got {len(description)}", file=file,
                         field="description")

    for key in ("license", "compatibility", "allowed-tools"):
        _optional_str(data, key, file)
    if len(data.get("compatibility") or "") > MAX_COMPATIBILITY:
        raise SkillError(f"at most {MAX_COMPATIBILITY} characters", file=file, field="compatibility")

    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        raise SkillError("required, a mapping with at least 'type'", file=file, field="metadata")
    for key, value in metadata.items():
        # The spec types metadata as string → string; other harnesses may reject anything else.
        if not isinstance(key, str) or not isinstance(value, str):
            raise SkillError("keys and values must be strings", file=file, field=f"metadata.{key}")
    skill_type = metadata.get("type")
    if skill_type not in SKILL_TYPES:
        raise SkillError(f"must be 'workflow' or 'reference', got {skill_type!r}", file=file,
                         field="metadata.type")

    conflicts, requires, over = _relations(metadata, name, file)
    return SkillManifest(name=name, type=skill_type, description=description.strip(),
                         conflicts_with=conflicts, requires_skills=requires, precedence_over=over)


def load_skill(skill_dir: Path, root_name: str) -> Skill:
    file = f"{root_name}/{skill_dir.name}/{SKILL_FILE}"
    md = skill_dir / SKILL_FILE
    if not md.is_file():
        raise SkillError(f"missing {SKILL_FILE}", file=file, field="SKILL.md")
    try:
        text = md.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SkillError("not UTF-8 text", file=file, field="SKILL.md") from exc
    data, body = split_frontmatter(text, file)
    manifest = parse_manifest(data, skill_dir.name, file)
    checklist_file = data["metadata"].get("checklist")
    if checklist_file is not None:
        manifest = manifest.model_copy(update={"checklist": load_checklist(skill_dir, checklist_file, file)})
    return Skill(manifest=manifest, body=body, path=file)


def load_checklist(skill_dir: Path, name: str, file: str) -> Checklist:
    """`metadata.checklist`: a file name in the skill's own directory (no paths: the skill stays portable)."""
    field = "metadata.checklist"
    if "/" in name or "\\" in name or name.startswith("."):
        raise SkillError(f"{name!r} must be a file name in the skill directory", file=file, field=field)
    path = skill_dir / name
    if not path.is_file():
        raise SkillError(f"{name!r} not found beside {SKILL_FILE}", file=file, field=field)
    try:
        return parse_checklist(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (yaml.YAMLError, ValueError, UnicodeDecodeError) as exc:
        raise SkillError(f"{name}: {exc}", file=file, field=field) from exc


def load_skills(directory: Path) -> dict[str, Skill]:
    """Every `<directory>/<name>/SKILL.md`, sorted by name; raises SkillError on the first defect."""
    dirs = sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    skills = {s.name: s for s in (load_skill(d, directory.name) for d in dirs)}
    validate_references(skills)
    return dict(sorted(skills.items()))


def validate_references(skills: Mapping[str, Skill]) -> None:
    """Every referenced name exists, and no skill's own closure conflicts with itself."""
    for skill in skills.values():
        m = skill.manifest
        for field, names in (("metadata.conflicts-with", m.conflicts_with),
                             ("metadata.requires-skills", m.requires_skills),
                             ("metadata.precedence-over", m.precedence_over)):
            missing = [n for n in names if n not in skills]
            if missing:
                raise UnknownSkill(f"unknown skill(s) {', '.join(missing)}", file=skill.path, field=field)
        for other in m.precedence_over:
            # Precedence resolves a declared conflict; one-sided, or the harness could not pick.
            if not conflict_declared(skill.name, other, skills):
                raise SkillError(f"{other!r} does not conflict with {skill.name!r}: precedence resolves a "
                                 "declared conflict only", file=skill.path, field="metadata.precedence-over")
            if skill.type != "workflow" or skills[other].type != "workflow":
                raise SkillError(f"precedence orders workflow contracts; {other!r} or {skill.name!r} is a reference",
                                 file=skill.path, field="metadata.precedence-over")
            if skill.name in skills[other].manifest.precedence_over:
                raise SkillError(f"{other!r} declares precedence over {skill.name!r} too", file=skill.path,
                                 field="metadata.precedence-over")
    for skill in skills.values():
        # A skill that can never be activated is a catalog bug: report it at load, not mid-task.
        try:
            _check_conflicts([s.name for s in required_closure([skill.name], skills)], skills, set())
        except SkillConflict as exc:
            raise SkillConflict(f"its required closure is self-conflicting: {exc}", file=skill.path,
                                field="metadata.requires-skills") from exc


# ---------------------------------------------------------------- catalog and activation


def catalog_block(skills: Mapping[str, Skill] | Iterable[Skill]) -> str:
    """The `<available_skills>` block of the system prompt (the Agent Skills catalog format): name, type, path and the description (the trigger)."""
    items = skills.values() if isinstance(skills, Mapping) else skills
    entries = [element("skill", {"name": s.name, "type": s.type, "path": s.path}, s.manifest.description, inline=True)
               for s in sorted(items, key=lambda s: s.name)]
    return render("available_skills", None, lines(*(fragment(["  ", e]) for e in entries)))


def _lookup(name: str, skills: Mapping[str, Skill]) -> Skill:
    skill = skills.get(name)
    if skill is None:
        known = ", ".join(sorted(skills)) or "none"
        raise UnknownSkill(f"unknown skill {name!r}; available skills: {known}")
    return skill


def required_closure(names: Iterable[str], skills: Mapping[str, Skill]) -> list[Skill]:
    """Requested skills (each once, in order), then their transitive requirements breadth-first."""
    out: list[Skill] = []
    seen: set[str] = set()
    for name in names:
        if name not in seen:
            seen.add(name)
            out.append(_lookup(name, skills))
    i = 0
    while i < len(out):  # `out` grows while we walk it: a breadth-first queue that never repeats
        for req in out[i].manifest.requires_skills:
            if req not in seen:
                seen.add(req)
                out.append(_lookup(req, skills))
        i += 1
    return out


def required_by(names: Iterable[str], skills: Mapping[str, Skill]) -> dict[str, str]:
    """For each skill the closure adds beyond `names`: the skill that first required it."""
    requested = list(dict.fromkeys(names))
    parents: dict[str, str] = {}
    for skill in required_closure(requested, skills):
        for req in skill.manifest.requires_skills:
            if req not in requested and req not in parents:
                parents[req] = skill.name
    return parents


def conflict_declared(a: str, b: str, skills: Mapping[str, Skill]) -> bool:
    """`a` and `b` declare a conflict, in either direction."""
    return (a in skills and b in skills[a].manifest.conflicts_with) or (b in skills and a in skills[b].manifest.conflicts_with)


def outranks(a: str, b: str, skills: Mapping[str, Skill]) -> bool:
    """`a`'s manifest declares precedence over `b`."""
    return a in skills and b in skills[a].manifest.precedence_over


def outranked_in_batch(names: Iterable[str], skills: Mapping[str, Skill]) -> dict[str, str]:
    """Requested names that another requested name outranks (name -> the winner): not activated."""
    asked = list(dict.fromkeys(names))
    return {n: w for n in asked for w in asked if w != n and outranks(w, n, skills)}


def conflict_text(name: str, other: str, role: Callable[[str], str], skills: Mapping[str, Skill]) -> str:
    head = f"{role(name)} declares a conflict with {role(other)}; these skills cannot be active together, so none of the requested skills was activated."
    winner = name if outranks(name, other, skills) else other if outranks(other, name, skills) else None
    if winner is None:  # no manifest ranks them: the only case the agent asks (seed: "Skill conflicts")
        return f"{head} No manifest declares precedence between them: ask the user which workflow applies."
    loser = other if winner == name else name
    return (f"{head} {role(winner)} takes precedence over {role(loser)} (its manifest's metadata.precedence-over): "
            f"continue with {winner!r}; do not ask the user. A new user request can start a different task.")


def _check_conflicts(new: list[str], skills: Mapping[str, Skill], active: set[str],
                     requested: Iterable[str] = ()) -> None:
    union = set(active) | set(new)
    asked = set(requested)

    def role(n: str) -> str:
        if n in active and n not in new:
            return f"{n!r} (already active)"
        return f"{n!r} (requested)" if n in asked else f"{n!r} (required)"

    for name in sorted(union):
        for other in skills[name].manifest.conflicts_with if name in skills else []:
            # Only pairs touching the new skills matter: the active set was accepted earlier.
            if other in union and (name in new or other in new):
                raise SkillConflict(conflict_text(name, other, role, skills))


def resolve_activation(names: list[str], skills: Mapping[str, Skill], active: set[str]) -> list[Skill]:
    """The skills one `skill` tool batch activates: the closure minus what is already active.

    Refuses the whole batch (nothing activates) on an unknown name or a conflict, in either
    direction, anywhere in active + requested + required; a requested skill that another requested
    skill outranks is left out first (`outranked_in_batch`).
    """
    dropped = outranked_in_batch(names, skills)
    names = [n for n in names if n not in dropped]
    closure = required_closure(names, skills)
    _check_conflicts([s.name for s in closure], skills, active, names)
    return [s for s in closure if s.name not in active]


def split_skill_command(text: str) -> tuple[str, str] | None:
    """`/skill:NAME [args]` → (NAME, args); anything else → None. Never interprets other text."""
    match = COMMAND_RE.fullmatch(text.strip())
    if match is None:
        return None
    return match.group(1), (match.group(2) or "").strip()


def parse_skill_command(text: str) -> str | None:
    """A user message `/skill:NAME` → NAME (the runtime then activates it like the skill tool)."""
    parsed = split_skill_command(text)
    return parsed[0] if parsed else None
