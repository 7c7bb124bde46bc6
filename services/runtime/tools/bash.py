"""bash: a shell command, confined by the session's sandbox (services/runtime/sandbox), with the
workspace as cwd, a timeout, an output cap, the workspace quota watched while the call runs (the call is
killed past it, sandbox/watch.py) and enforced after it (sandbox/quota.py).

Files the command changes are published as ArtifactChange(agent), found by comparing the
workspace's (mtime, size) before and after: two walks (shared/storage/walk.py, bounded, in the I/O pool).
They are what the agent saw of them since (the result's `files`: path -> SHA-256, None when removed;
services/runtime/store/file_reads.py), and the result names each one someone else had changed since the
agent last saw it, or that it never saw (prompts/interface.txt).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pydantic import Field

from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.sandbox import SandboxResult, quota
from services.runtime.skillset.paths import sandbox_skills_dir
from services.runtime.store.file_reads import FileReads, altered_by_others, sha256, stale
from services.runtime.tools.files import file_ref
from services.runtime.tools.ports import AgentFilesHost, ShellHost
from shared.mcp.tool_schema import ToolArgs, optional
from shared.storage import workspace_fs
from shared.storage.disk import DiskError
from shared.storage.walk import Walk, walk

DEFAULT_TIMEOUT_S = 60
MAX_TIMEOUT_S = 600
MAX_RECORDED = 1000  # changed files a result records as seen (past it: read before writing them)


class BashArgs(ToolArgs):
    command: str = Field(description="The command line to run.")
    timeout: int = optional("Seconds before the command is killed.")


def altered_note(others: list[str]) -> str:
    return ("\n[this command altered files that someone else changed since you last read them, or that you had "
            "not read: " + "; ".join(others) + ". Read them to check that their changes are kept.]")


def bash_tool(host: ShellHost, agent: AgentFilesHost | None = None) -> Tool:
    """`agent`: what the agent saw of each file (None: nothing recorded or named)."""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        root = host.paths.workspace
        root.mkdir(parents=True, exist_ok=True)
        timeout = min(max(int(args.get("timeout", DEFAULT_TIMEOUT_S)), 1), MAX_TIMEOUT_S)
        box = host.sandbox
        if box.layer is None:  # never unconfined by accident
            return ToolOutcome(content=f"bash is disabled: {box.reason}", is_error=True, details={"sandbox": "none"})
        limits = host.workspace_quota.limits
        before = await asyncio.to_thread(walk, root, limits)
        reads = agent.file_reads if agent is not None else None
        changed_before = set() if reads is None else await asyncio.to_thread(stale, root, reads, reads.recent())
        mark = 0 if reads is None else reads.mark()
        await host.guard()
        # Skills ship scripts (gml-cli: `python3 "$GAMMA_SKILLS_DIR/gml-cli/scripts/gml.py"`): the sandbox
        # sets the variable itself (/skills under bwrap), whatever started the runtime.
        req = box.request(args["command"], root, sandbox_skills_dir(), timeout)
        if before.complete:  # the watchdog starts from this measure instead of walking again
            req = req.model_copy(update={"workspace_usage": (before.disk, len(before.entries))})
        res = await box.run(req, ctx.signal)
        if res.error is not None:
            return ToolOutcome(content=f"bash is disabled: {res.error}", is_error=True, details={"sandbox": "none"})
        after = await asyncio.to_thread(walk, root, limits)
        over = await asyncio.to_thread(quota.enforce, root, before, after, host.workspace_quota)
        if over is not None:
            after = await asyncio.to_thread(walk, root, limits)
        files = await _publish_changes(host, root, before, after)
        text, details = _limit_notes(res, box.limits.memory_bytes, over)
        if reads is not None and files:
            recorded, others = _seen_by_agent(reads, files, set(before.files()), changed_before | reads.saved_since(mark))
            details["files"] = recorded
            if others:
                details["alteredUserFiles"] = others
                text += altered_note(others)
        code = res.exit_code
        if res.timed_out:
            return ToolOutcome(content=text + f"\n[timed out after {timeout}s]", is_error=True,
                               details={**details, "timedOut": True})
        if res.aborted:  # the run's abort: the loop puts its note first (engine/loop.py aborted_outcome)
            return ToolOutcome(content=text, is_error=True, details={**details, "aborted": True})
        return ToolOutcome(content=text or "(no output)", is_error=code != 0 or over is not None or res.stopped is not None,
                           details=details)

    return Tool.typed(
        name="bash",
        description="Run a bash command with the session workspace as the working directory. Output is "
        "capped; the command is killed after `timeout` seconds (default 60), with anything it started. It "
        "runs sandboxed: no network, only the workspace is writable (and a private $TMPDIR, emptied after "
        "the call), skills are read-only under $GAMMA_SKILLS_DIR, memory and processes are limited.",
        arguments=BashArgs,
        execute=execute,
    )


def _seen_by_agent(reads: FileReads, files: dict[str, str | None], existed: set[str],
                   by_others: set[str]) -> tuple[dict[str, str | None], list[str]]:
    """What the command's result records as seen by the agent (not a file someone else changed, or
    one that existed unread: those still need a read), and the note's list of those files."""
    others = altered_by_others(files, existed, by_others, reads)
    unseen = by_others | {p for p in files if p in existed and reads.seen(p) is None}
    recorded = dict(list({p: sha for p, sha in files.items() if p not in unseen or sha is None}.items())[:MAX_RECORDED])
    reads.bash_changed(recorded, set())
    return recorded, others


def _limit_notes(res: SandboxResult, memory_bytes: int, over: quota.QuotaReport | None) -> tuple[str, dict[str, Any]]:
    """The output, with a note for each limit the call met while it ran or after."""
    text = res.output
    details: dict[str, Any] = {"exitCode": res.exit_code, "truncated": res.truncated, "sandbox": res.layer}
    if res.stopped:  # the disk watchdog killed it (sandbox/watch.py)
        details["stopped"] = True
        text += "\n" + res.stopped
    if res.memory_killed:
        details["memoryKilled"] = res.memory_killed
        text += (f"\n[the call reached its memory limit ({memory_bytes} bytes for all its processes and its /tmp, "
                 f"HOME and /dev/shm together): the kernel killed {res.memory_killed} process(es)]")
    if over is not None:
        details["quotaExceeded"] = True
        text += "\n" + over.message()
    return text, details


async def _publish_changes(host: ShellHost, root: Path, before_walk: Walk, after_walk: Walk) -> dict[str, str | None]:
    """ArtifactChange(agent) for each regular file whose (mtime, size) changed; a deletion only when
    both walks saw the whole workspace (a file past an incomplete walk is not gone). Returns each
    changed file's content hash (None: removed)."""
    out: dict[str, str | None] = {}
    before, after = before_walk.files(), after_walk.files()
    for rel, stamp in sorted(after.items()):
        if before.get(rel) != stamp:
            if stamp[1] > host.max_file_bytes:
                continue
            try:  # beneath the workspace: a link the command planted is not followed out of it
                data = await asyncio.to_thread(workspace_fs.read_bytes, root, rel)
            except DiskError:
                continue  # gone or replaced since the scan: the next scan sees what is there
            if len(data) <= host.max_file_bytes:
                await host.artifact_changed(file_ref(rel), "file", content=data)
                out[rel] = sha256(data)
    if not (before_walk.complete and after_walk.complete):
        return out
    for rel in sorted(set(before) - set(after)):
        await host.artifact_changed(file_ref(rel), "file", deleted=True)
        out[rel] = None
    return out
