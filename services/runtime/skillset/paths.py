"""Where the runtime finds the repository's skills (`GAMMA_SKILLS_DIR`, else `<repo>/skills`), and the
copy of them the sandbox's user can reach."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from shared.settings import Settings, load_settings

REPO_SKILLS = Path(__file__).resolve().parents[3] / "skills"


def skills_dir(settings: Settings | None = None) -> Path:
    return (settings or load_settings()).runtime.skills_dir or REPO_SKILLS


def _reachable_by_others(path: Path) -> bool:
    """Every directory on the way can be searched by any user (a sandboxed command runs as a session
    uid of its own when the runtime is root: services/runtime/sandbox/host.py)."""
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


@functools.lru_cache(maxsize=1)
def sandbox_skills_dir() -> Path:
    """The skills as the sandbox sees them: the directory itself, or, when the runtime is root and a
    parent is closed to other users (a checkout under a 0700 directory), a read-only copy in the temp
    directory, made once per process (skills are part of the deployment, not edited while it runs)."""
    source = skills_dir().resolve()
    if os.geteuid() != 0 or _reachable_by_others(source):
        return source
    tag = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    work = Path(tempfile.mkdtemp(prefix=f"gamma-skills-{tag}-"))
    target = work / "skills"
    shutil.copytree(source, target, symlinks=False)
    for root, dirs, files in os.walk(work):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    return target
