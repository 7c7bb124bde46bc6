"""The Sandbox: one chosen layer and its limits; `run(request, stop)` -> SandboxResult."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from . import host
from .bwrap import bwrap_argv, bwrap_binary, seccomp_fd, ulimit_prologue
from .bwrap import env as bwrap_env
from .landlock import env as landlock_env
from .landlock import landlock_argv
from .runner import Exit, run_confined
from .types import Layer, SandboxLimits, SandboxRequest, SandboxResult, walk_limits


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
        tmp: Path | None = None
        fds: list[int] = []
        try:
            if self.layer == "off":
                exit_ = await self._off(req, stop)
            else:
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
                exit_ = await run_confined(argv, env=env, cwd="/", wall_s=req.timeout, stop=stop,
                                           output_chars=req.limits.output_chars, pass_fds=fds)
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if tmp is not None:  # nothing the call wrote outside the workspace survives it
                await asyncio.to_thread(host.remove_tmp, tmp)
        return SandboxResult(exit_code=exit_.code, output=exit_.output, truncated=exit_.truncated,
                             timed_out=exit_.timed_out, aborted=exit_.aborted,
                             duration=time.monotonic() - started, layer=self.layer)

    async def _off(self, req: SandboxRequest, stop: asyncio.Event | None) -> Exit:
        """GAMMA_SANDBOX=off: no confinement, but still a cleared environment, rlimits and a group kill."""
        env = {**bwrap_env(_tz()), "HOME": str(req.workspace), "GAMMA_SKILLS_DIR": str(req.skills_dir)}
        env.pop("TMPDIR")
        return await run_confined(["/bin/bash", "-c", ulimit_prologue(req.limits) + req.command], env=env,
                                  cwd=str(req.workspace), wall_s=req.timeout, stop=stop,
                                  output_chars=req.limits.output_chars)
