"""Where the runtime finds the repository's skills (`GAMMA_SKILLS_DIR`, else `<repo>/skills`)."""

from __future__ import annotations

import os
from pathlib import Path


def skills_dir() -> Path:
    return Path(os.environ.get("GAMMA_SKILLS_DIR") or Path(__file__).resolve().parents[2] / "skills")
