"""bash: a shell command with the workspace as cwd, a timeout and an output cap.

Files the command changes are published as ArtifactChange(agent), found by comparing the
workspace's (mtime, size) before and after.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

from ..engine.types import Tool, ToolContext, ToolOutcome
from ..paths import skills_dir
from .files import file_ref
from .host import ToolHost

DEFAULT_TIMEOUT_S = 60
MAX_TIMEOUT_S = 600
OUTPUT_CAP = 30_000
SCAN_LIMIT = 2000


def _scan(root: Path) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    if not root.exists():
        return out
    for path in root.rglob("*"):
        if len(out) >= SCAN_LIMIT:
            break
        if path.is_file() and not path.is_symlink():
            st = path.stat()
            out[path.relative_to(root).as_posix()] = (st.st_mtime_ns, st.st_size)
    return out


def bash_tool(host: ToolHost) -> Tool:
    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        root = host.paths.workspace
        root.mkdir(parents=True, exist_ok=True)
        timeout = min(max(int(args.get("timeout", DEFAULT_TIMEOUT_S)), 1), MAX_TIMEOUT_S)
        before = _scan(root)
        await host.guard()
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", args["command"], cwd=root, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True,
            # Skills ship scripts (gml-cli: `python3 "$GAMMA_SKILLS_DIR/gml-cli/scripts/gml.py"`): the
            # tool sets the variable itself, whatever started the process.
            env={**os.environ, "HOME": str(root), "GAMMA_SKILLS_DIR": str(skills_dir().resolve())},
        )
        timed_out = aborted = False
        try:
            waiter = asyncio.ensure_future(proc.communicate())
            stop = asyncio.ensure_future(ctx.signal.wait())
            done, _ = await asyncio.wait({waiter, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if waiter not in done:
                timed_out, aborted = stop not in done, stop in done
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            out, _ = await waiter
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        text = (out or b"").decode("utf-8", errors="replace")
        truncated = len(text) > OUTPUT_CAP
        if truncated:
            text = text[:OUTPUT_CAP // 2] + f"\n\n[... {len(text) - OUTPUT_CAP} characters cut ...]\n\n" + \
                text[-OUTPUT_CAP // 2 :]
        await _publish_changes(host, root, before)
        code = proc.returncode
        if timed_out:
            return ToolOutcome(content=text + f"\n[timed out after {timeout}s]", is_error=True,
                               details={"exitCode": code, "timedOut": True})
        if aborted:
            return ToolOutcome(content=text + "\n[aborted]", is_error=True, details={"aborted": True})
        return ToolOutcome(content=text or "(no output)", is_error=code != 0,
                           details={"exitCode": code, "truncated": truncated})

    return Tool(
        name="bash",
        description="Run a bash command with the session workspace as the working directory. Output is "
        "capped; the command is killed after `timeout` seconds (default 60).",
        parameters={
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line to run."},
                "timeout": {"type": "integer", "description": "Seconds before the command is killed."},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        execute=execute,
    )


async def _publish_changes(host: ToolHost, root: Path, before: dict[str, tuple[int, int]]) -> None:
    after = _scan(root)
    for rel, stamp in sorted(after.items()):
        if before.get(rel) != stamp:
            data = (root / rel).read_bytes()
            if len(data) <= host.max_file_bytes:
                await host.artifact_changed(file_ref(rel), "file", content_b64=base64.b64encode(data).decode())
    for rel in sorted(set(before) - set(after)):
        await host.artifact_changed(file_ref(rel), "file", deleted=True)
