"""Service processes forked from one that has already imported them, for the tests' stacks.

Most of a service's start is its imports (about 1-2 s of CPU each: openai, FastAPI, pydantic), and
the suite starts a few hundred services: on two cores that was a third of the suite's CPU. One zygote
per test process imports the five services once; a start asks it to fork, and the child sets its
environment, working directory and log, then runs `python -m services.NAME` as the interpreter would
(its own exit path: atexit handlers, non-daemon threads, flushed streams).

The zygote is a plain single-threaded process (nothing it imported may start a thread: checked at
its start, since a fork copies only the forking thread). Services that need another interpreter
setup (another source tree, other PYTHON* variables) are started with a fresh `python -m`
(tests/support/stack.py decides). `ZygoteProcess` is the test side's handle, with the members of
`subprocess.Popen` the tests use; the exit status comes from the zygote, which is the child's parent.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

SERVICE_MODULES = ("services.runtime", "services.proxy", "services.notifications", "services.digest",
                   "services.compaction", "scripted.factory")
ROOT = Path(__file__).resolve().parents[2]


# ---- the zygote process ---------------------------------------------------------------------------


def _preload() -> None:
    import importlib

    for name in SERVICE_MODULES:
        importlib.import_module(name)
        if name.startswith("services."):
            # Its imports stay loaded; the module itself runs afresh as __main__ in the child (runpy
            # warns about a __main__ already in sys.modules).
            importlib.import_module(f"{name}.__main__")
            del sys.modules[f"{name}.__main__"]
    if threading.active_count() != 1:
        raise RuntimeError(f"an import started a thread: {threading.enumerate()}")


def _reap(codes: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        codes[pid] = os.waitstatus_to_exitcode(status)


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become `python -m MODULE` with the request's environment and log."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, 4096)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    module = request["module"]
    sys.argv = [module]
    # Its command line stays the zygote's (a fork keeps argv): the thread name at least says which
    # service it is (`ps -o comm`, top).
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(module.removeprefix("services.")[:15])
    import runpy

    runpy.run_module(module, run_name="__main__", alter_sys=True)


def serve() -> None:
    """Read spawn/status requests (one JSON line each) from stdin, answer one JSON line each."""
    _preload()
    codes: dict[int, int] = {}
    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        _reap(codes)
        if request["op"] == "status":
            out.write(json.dumps({"returncode": codes.get(request["pid"])}) + "\n")
            out.flush()
            continue
        pid = os.fork()
        if pid == 0:
            _child(request)  # returns to the interpreter's own exit, as `python -m` does
            return
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()


# ---- the test side --------------------------------------------------------------------------------


class Zygote:
    """The test process's zygote: started on first use, asked over its stdin/stdout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._env: dict[str, str] = {}

    @staticmethod
    def _base_env() -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1"}

    def _started(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._env = self._base_env()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True, cwd=ROOT, env=self._env,
            )
            self._read(self._proc)
        return self._proc

    @staticmethod
    def _read(proc: subprocess.Popen[str]) -> dict[str, Any]:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the test zygote exited ({proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            proc = self._started()
            stdin: IO[str] | None = proc.stdin
            assert stdin is not None
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            return self._read(proc)

    def fits(self, env: dict[str, str], cwd: Path) -> bool:
        """Whether a child forked from this zygote is the process `python -m` would start: the same
        source tree and the same interpreter settings (PYTHON* variables act at interpreter start)."""
        if cwd.resolve() != ROOT:
            return False
        base = self._env or self._base_env()
        python_vars = {k for k in (*env, *base) if k.startswith("PYTHON")}
        return all(env.get(k) == base.get(k) for k in python_vars)

    def spawn(self, module: str, env: dict[str, str], cwd: Path, log: Path) -> ZygoteProcess:
        answer = self._ask({"op": "spawn", "module": module, "env": env, "cwd": str(cwd), "log": str(log)})
        return ZygoteProcess(answer["pid"], self)

    def returncode(self, pid: int) -> int | None:
        code = self._ask({"op": "status", "pid": pid})["returncode"]
        return None if code is None else int(code)


class ZygoteProcess:
    """A service forked by the zygote, with the members of `subprocess.Popen` the tests use."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote
        self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = self._zygote.returncode(self.pid)
            if self.returncode is not None:
                os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired([self.pid], timeout or 0)
            select.select([self._pidfd], [], [], 0.05 if left is None else min(left, 0.05))
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)


ZYGOTE = Zygote()


if __name__ == "__main__":
    serve()
