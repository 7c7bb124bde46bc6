"""The Sandbox: one chosen layer and its limits; `run(request, stop)` -> SandboxResult."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from services.runtime.sandbox import cgroup as memcg
from services.runtime.sandbox import host, watch
from services.runtime.sandbox.bwrap import bwrap_argv, bwrap_binary, seccomp_fd, ulimit_prologue
from services.runtime.sandbox.bwrap import env as bwrap_env
from services.runtime.sandbox.landlock import env as landlock_env
from services.runtime.sandbox.landlock import landlock_argv
from services.runtime.sandbox.runner import Exit, run_confined
from services.runtime.sandbox.types import Layer, SandboxLimits, SandboxRequest, SandboxResult, walk_limits
from shared.storage.walk import WalkLimits

log = structlog.get_logger()


def _tz() -> str:
    # TZ is the POSIX variable of the process's own time zone, passed on to commands: not a Gamma setting
    # (README "Configuration": the standard variables read where they apply).
    return os.environ.get("TZ") or "UTC"  # noqa: TID251


@dataclass
class Sandbox:
    layer: Layer | None  # None: no layer works here; every run returns `reason` as its error
    limits: SandboxLimits
    reason: str = ""
    proc: bool = True  # bwrap: a fresh /proc inside (False where the container's /proc is masked)
    cgroup: memcg.Base | None = None  # where each call's memory cgroup is made (cgroup.py); None: none

    def request(self, command: str, workspace: Path, skills_dir: Path, timeout: float) -> SandboxRequest:
        return SandboxRequest(command=command, workspace=workspace, skills_dir=skills_dir, limits=self.limits,
                              timeout=timeout)

    async def run(self, req: SandboxRequest, stop: asyncio.Event | None = None) -> SandboxResult:
        if self.layer is None:
            return SandboxResult(exit_code=None, output="", error=self.reason or "no sandbox layer works here")
        started = time.monotonic()
        uid = host.sandbox_uid(req.workspace)
        req.workspace.mkdir(parents=True, exist_ok=True)
        if uid is not None:  # in the I/O pool: a command may have made the tree as large as its bounds
            try:
                await asyncio.to_thread(host.hand_over, req.workspace, uid, walk_limits(req.limits))
            except OSError as exc:  # e.g. a root-squashed NFS data dir: say so rather than run as root
                return SandboxResult(exit_code=None, output="", layer=self.layer,
                                     error=f"the workspace cannot be handed to the sandbox's user {uid}: {exc}")
        group: memcg.CallGroup | None = None
        if self.cgroup is not None:
            try:
                # inline: cgroupfs is in memory, a mkdir and two writes cost microseconds (no thread hop)
                group = memcg.create(self.cgroup, req.limits.memory_bytes)
            except OSError as exc:  # never run without the bound the host said it offers
                return SandboxResult(exit_code=None, output="", layer=self.layer,
                                     error=f"the call's memory cgroup cannot be made in {self.cgroup.path}: {exc}")
        oom = 0
        try:
            exit_ = await self._confined(req, stop, uid, group)
        finally:
            if group is not None:
                oom = group.oom_kills()
                if not group.remove(0.0):
                    # the pid namespace is still being torn down: removed in the I/O pool, without
                    # holding the call's result back
                    asyncio.get_running_loop().run_in_executor(None, group.remove, 60.0)
        if isinstance(exit_, SandboxResult):
            return exit_
        return SandboxResult(exit_code=exit_.code, output=exit_.output, truncated=exit_.truncated,
                             timed_out=exit_.timed_out, aborted=exit_.aborted,
                             duration=time.monotonic() - started, layer=self.layer, stopped=exit_.stopped,
                             memory_killed=oom)

    async def _confined(self, req: SandboxRequest, stop: asyncio.Event | None, uid: int | None,
                        group: memcg.CallGroup | None) -> Exit | SandboxResult:
        tmp: Path | None = None
        fds: list[int] = []
        try:
            if self.layer == "off":
                return await self._off(req, stop, group)
            fds = [host.open_dir(req.workspace), host.open_dir(req.skills_dir)]
            if self.layer == "bwrap":
                binary = bwrap_binary()
                if binary is None:
                    return SandboxResult(exit_code=None, output="", error="bwrap is no longer installed")
                fds.append(seccomp_fd())
                argv = host.as_user(bwrap_argv(binary, req.command, req.limits, fds[0], fds[1], _tz(), self.proc,
                                               fds[2]), uid)
            else:
                tmp = host.private_tmp(uid)
                fds.append(host.open_dir(tmp))
                argv = landlock_argv(req.command, req.limits, fds[0], fds[1], fds[2], req.skills_dir, tmp,
                                     _tz(), uid)
            env = landlock_env(req.skills_dir, tmp, _tz()) if tmp is not None else {}
            return await run_confined(group.gate(argv) if group is not None else argv, env=env, cwd="/",
                                      wall_s=req.timeout, stop=stop, output_chars=req.limits.output_chars,
                                      pass_fds=fds, watchdog=_guard(_bounds(req, tmp), walk_limits(req.limits), group))
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if tmp is not None:  # nothing the call wrote outside the workspace survives it
                await asyncio.to_thread(host.remove_tmp, tmp)

    async def _off(self, req: SandboxRequest, stop: asyncio.Event | None, group: memcg.CallGroup | None) -> Exit:
        """GAMMA_SANDBOX=off: no confinement, but still a cleared environment, rlimits and a group kill."""
        env = {**bwrap_env(_tz()), "HOME": str(req.workspace), "GAMMA_SKILLS_DIR": str(req.skills_dir)}
        env.pop("TMPDIR")
        argv = ["/bin/bash", "-c", ulimit_prologue(req.limits) + req.command]
        return await run_confined(group.gate(argv) if group is not None else argv, env=env,
                                  cwd=str(req.workspace), wall_s=req.timeout, stop=stop,
                                  output_chars=req.limits.output_chars,
                                  watchdog=_guard(_bounds(req, None), walk_limits(req.limits), group))


def _bounds(req: SandboxRequest, tmp: Path | None) -> list[watch.Bound]:
    """The workspace at its byte quota; landlock's private temporary directory (on the host's disk,
    where bwrap's is a sized tmpfs) at the tmpfs size."""
    lim = req.limits
    out = [watch.Bound(req.workspace, lim.file_bytes, lim.workspace_entries, "the workspace", req.workspace_usage)]
    if tmp is not None:
        out.append(watch.Bound(tmp, lim.tmp_bytes, lim.workspace_entries, "the private temporary directory", (0, 0)))
    return out


async def _guard(bounds: list[watch.Bound], limits: WalkLimits, group: memcg.CallGroup | None) -> str:
    """The disk watchdog's reason, or "" once the kernel killed at the call's memory limit: the call then
    ends as a whole at once (what its tmpfs holds stays charged, so whatever runs on would only wait in
    the cgroup's OOM handling until its timeout)."""
    tasks = [asyncio.ensure_future(_disk(bounds, limits))]
    if group is not None:
        tasks.append(asyncio.ensure_future(_oom(group)))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        return done.pop().result()
    finally:
        for task in tasks:
            task.cancel()


async def _disk(bounds: list[watch.Bound], limits: WalkLimits) -> str:
    try:
        return (await watch.watch(bounds, limits)).message()
    except Exception:  # a broken watchdog must not end the call as if it had tripped
        log.exception("sandbox_watchdog_failed")
        await asyncio.Event().wait()
        raise


async def _oom(group: memcg.CallGroup) -> str:
    while True:  # the kernel offers no event for this here (v1 eventfd needs a cgroup.event_control writer)
        if await asyncio.to_thread(group.oom_kills):
            return ""
        await asyncio.sleep(watch.SAMPLE_S)
