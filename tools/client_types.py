"""clients/typescript/src/schema.d.ts from docs/openapi.json, by openapi-typescript (npm; `make node`).

`make docs` (tools/docs.py) runs this after writing the OpenAPI document; tests/deploy/test_client_types.py
regenerates into a temporary file and fails when the committed types drifted.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / "node_modules" / "openapi-typescript" / "bin" / "cli.js"
TYPES = ROOT / "clients" / "typescript" / "src" / "schema.d.ts"
# Request fields with a default stay optional for the caller (the server fills them in).
OPTIONS = ("--default-non-nullable", "false")


def available() -> bool:
    return shutil.which("node") is not None and CLI.exists()


def generate(openapi: Path, out: Path) -> None:
    node = shutil.which("node")
    if node is None or not CLI.exists():
        raise RuntimeError("node or openapi-typescript missing: run `make node`")
    subprocess.run([node, str(CLI), str(openapi), *OPTIONS, "-o", str(out)], check=True, capture_output=True,
                   text=True, timeout=120, cwd=ROOT)
