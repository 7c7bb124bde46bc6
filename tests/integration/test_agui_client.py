"""The AG-UI route driven by the official client, and the TypeScript client as a package.

`clients/typescript/test/agui.test.mts` runs under Node's test runner against this module's stack, through
`@ag-ui/client`'s HttpAgent (GammaAgent adds only the reattach): a deck request streams to completion and
its question is an interrupt the answer resumes, a steer mid-run arrives, the client's state copy equals
`GET /ui`, and a dropped run reattaches with nothing twice and nothing missed. The package test runs
`npm pack` on a copy of `clients/typescript` (its `prepack` builds with tsc) and imports the packed
tarball's entry points from a project that installed it, type-checking a consumer against its types."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.support.needs import needs
from tests.support.stack import API_TOKEN, OTHER_TOKEN, Stack

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "typescript"
MODULES = ROOT / "node_modules"
NODE, NPM = shutil.which("node"), shutil.which("npm")
TSC = MODULES / "typescript" / "bin" / "tsc"
AGUI = MODULES / "@ag-ui" / "client"
pytestmark = [needs(None if NODE and NPM and TSC.exists() and AGUI.exists() else
                    "node, npm, typescript or @ag-ui/client missing (make node)"),
              pytest.mark.timeout(300)]

CONSUMER = """
import { GammaClient, sessionEvents } from "@gamma-harness/client";
import { GammaAgent, CURSOR_KEY } from "@gamma-harness/client/ag-ui";
const client: GammaClient = new GammaClient({ baseUrl: "http://127.0.0.1:1", token: "t" });
const agent: GammaAgent = new GammaAgent({ baseUrl: "http://127.0.0.1:1", token: "t", sessionId: "s_1" });
const cursor: string | undefined = agent.cursor;
console.log(typeof sessionEvents, typeof client.createSession, agent.threadId, CURSOR_KEY, cursor === undefined);
"""


def test_the_official_client_drives_a_session(module_stack: Stack, tmp_path: Path) -> None:
    assert NODE is not None
    out = tmp_path / "dist"
    compiled = subprocess.run([NODE, str(TSC), "-p", str(CLIENT), "--outDir", str(out)], capture_output=True,
                              text=True, timeout=180, cwd=ROOT)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    (out / "node_modules").symlink_to(MODULES)  # the compiled tests resolve @ag-ui/client from the repo's
    env = dict(os.environ, GAMMA_BASE_URL=module_stack.url(), GAMMA_TOKEN=API_TOKEN, GAMMA_OTHER_TOKEN=OTHER_TOKEN)
    ran = subprocess.run([NODE, "--test", str(out / "test" / "agui.test.mjs")], capture_output=True, text=True,
                         timeout=240, env=env, cwd=tmp_path)
    report = ran.stdout + ran.stderr
    assert ran.returncode == 0, report
    assert "# fail 0" in report and "# pass 3" in report, report


def test_npm_pack_makes_a_package_with_types_that_installs_and_imports(tmp_path: Path) -> None:
    assert NODE is not None and NPM is not None
    work = tmp_path / "src"
    shutil.copytree(CLIENT, work / "client", ignore=shutil.ignore_patterns("dist", "*.tgz"))
    (work / "node_modules").symlink_to(MODULES)  # tsc for `prepack`
    packed = subprocess.run([NPM, "pack", "--silent", "--pack-destination", str(tmp_path)], capture_output=True,
                            text=True, timeout=180, cwd=work / "client")
    assert packed.returncode == 0, packed.stdout + packed.stderr
    tarball = tmp_path / packed.stdout.strip().splitlines()[-1]
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
        for name in ("index.mjs", "index.d.mts", "client.mjs", "events.mjs", "ag-ui.mjs", "ag-ui.d.mts", "schema.d.ts"):
            assert f"package/dist/{name}" in names, sorted(names)
        assert not any("/test/" in n or n.endswith(".mts") and not n.endswith(".d.mts") for n in names), sorted(names)
        project = tmp_path / "project"
        installed = project / "node_modules" / "@gamma-harness"
        installed.mkdir(parents=True)
        tar.extractall(installed, filter="data")
    (installed / "package").rename(installed / "client")
    for dep in ("@ag-ui", "rxjs", "typescript", "@types"):  # its peers, as the consumer's project would have them
        (project / "node_modules" / dep).symlink_to(MODULES / dep)
    (project / "package.json").write_text('{"type": "module"}')
    (project / "main.mts").write_text(CONSUMER)
    checked = subprocess.run([NODE, str(TSC), "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022",
                              "--lib", "es2022,dom", "--strict", "--skipLibCheck", "--types", "node", "main.mts"],
                             capture_output=True, text=True, timeout=180, cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = subprocess.run([NODE, "main.mjs"], capture_output=True, text=True, timeout=60, cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["function", "function", "s_1", "gammaCursor", "true"]
