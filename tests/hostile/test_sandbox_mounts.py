"""What a sandboxed command learns from /proc/self/mountinfo (docs/security.md "What the command sees of the
mounts"): under bwrap only the sandbox's own mounts, whose bind sources are the documented ones; under
landlock the file is denied."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.runtime.sandbox import SandboxLimits
from services.runtime.sandbox.bwrap import root_args
from services.runtime.sandbox.core import Sandbox
from services.runtime.skillset.paths import sandbox_skills_dir
from tests.sandbox.conftest import layer_params

MOUNT_POINTS = {"/", "/usr", "/etc", "/proc", "/dev", "/dev/null", "/dev/zero", "/dev/full", "/dev/random",
                "/dev/urandom", "/dev/tty", "/dev/pts", "/dev/shm", "/tmp", "/home/agent", "/skills", "/workspace"}


def read_mountinfo(layer: str, workspace: Path) -> tuple[int | None, str]:
    box = Sandbox(layer=layer, limits=SandboxLimits())  # type: ignore[arg-type]
    result = asyncio.run(box.run(box.request("cat /proc/self/mountinfo", workspace, sandbox_skills_dir(), 30)))
    assert result.error is None, result.error
    return result.exit_code, result.output


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layer", layer_params())
def test_mountinfo_shows_only_the_sandboxes_own_mounts(layer: str, tmp_path: Path) -> None:
    workspace = tmp_path / "sessions" / "s_mounts" / "workspace"
    workspace.mkdir(parents=True)
    code, output = read_mountinfo(layer, workspace)
    if layer == "landlock":
        assert code != 0 and "Permission denied" in output, output
        return
    assert code == 0, output
    rows = [line.split(" ") for line in output.splitlines() if line.strip()]
    points = {row[4] for row in rows}
    assert points <= MOUNT_POINTS and {"/", "/usr", "/etc", "/skills", "/workspace"} <= points, points
    etc_snapshot = root_args()[root_args().index("/etc") - 1]
    binds = {row[4]: row[3] for row in rows if row[4] in ("/usr", "/etc", "/skills", "/workspace")}
    # The bind sources are exactly the documented ones (as paths within their filesystems: suffixes).
    for point, source in {"/usr": "/usr", "/etc": etc_snapshot, "/skills": str(sandbox_skills_dir()),
                          "/workspace": str(workspace)}.items():
        assert source.endswith(binds[point]), (point, binds[point], source)
