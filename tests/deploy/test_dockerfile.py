"""deploy/Dockerfile, checked like a linter would (there is no Docker engine here), and its probe."""

from __future__ import annotations

import http.server
import shlex
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deploy import healthcheck
from tests.deploy.support import GAMMA_SERVICES, ROOT, entry_point_service

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
BUILD_TOOLS = ("build-essential", "gcc", "g++", "make", "clang", "python3-dev", "libc6-dev")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, op: str) -> list[str]:
        return [a for o, a in self.instructions if o == op]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Instructions with line continuations joined and comments dropped, grouped by FROM."""
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for item in logical:
        op, _, rest = item.partition(" ")
        op = op.upper()
        if op == "FROM":
            words = rest.split()
            image = words[0]
            for name, value in global_args.items():
                image = image.replace("${" + name + "}", value).replace("$" + name, value)
            stages.append(Stage(base=image, name=words[2] if len(words) > 2 and words[1].upper() == "AS" else None))
        elif not stages:
            if op == "ARG" and "=" in rest:
                k, _, v = rest.partition("=")
                global_args[k.strip()] = v.strip()
        else:
            stages[-1].instructions.append((op, rest.strip()))
    return global_args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse(DOCKERFILE.read_text())[1]


def test_multi_stage_on_a_slim_python_311(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    for stage in stages:
        assert stage.base.startswith("python:3.11") and "slim" in stage.base, stage.base
    final = stages[-1]
    copied_from = {a.split("--from=")[1].split()[0] for a in final.args("COPY") if "--from=" in a}
    assert copied_from and copied_from <= {s.name for s in stages[:-1]}


def test_final_stage_has_no_build_tools(stages: list[Stage]) -> None:
    final = " ".join(a for _, a in stages[-1].instructions)
    for tool in BUILD_TOOLS:
        assert tool not in final.split(), f"{tool} in the final stage"
    assert "pip install" not in final, "dependencies come built from the build stage"
    assert any(t in " ".join(stages[0].args("RUN")) for t in BUILD_TOOLS), "compilers belong in the build stage"


def test_runs_as_a_non_root_user(stages: list[Stage]) -> None:
    users = stages[-1].args("USER")
    assert users, "no USER in the final stage"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    # USER must come after the last RUN (which may need root) and before CMD.
    ops = [op for op, _ in stages[-1].instructions]
    assert max(i for i, op in enumerate(ops) if op == "USER") > max(i for i, op in enumerate(ops) if op == "RUN")


def test_healthcheck_and_default_command(stages: list[Stage]) -> None:
    final = stages[-1]
    (check,) = final.args("HEALTHCHECK")
    assert "CMD" in check and "/app/deploy/healthcheck.py" in check
    (cmd,) = final.args("CMD")
    assert entry_point_service(shlex.split(cmd.strip("[]").replace(",", " "))) in GAMMA_SERVICES


def test_every_copied_source_exists(stages: list[Stage]) -> None:
    for stage in stages:
        for arg in stage.args("COPY"):
            if "--from=" in arg:
                continue
            sources = [w for w in arg.split() if not w.startswith("--")][:-1]
            for src in sources:
                assert (ROOT / src).exists(), src


def test_every_service_module_is_an_importable_entry_point() -> None:
    for name in GAMMA_SERVICES:
        assert entry_point_service(["python", "-m", f"services.{name}"]) == name


def test_probe_finds_the_service_from_pid1() -> None:
    assert healthcheck.service_from_cmdline(b"python\0-m\0services.runtime\0") == "runtime"
    assert healthcheck.service_from_cmdline(b"/opt/venv/bin/python\0-m\0services.notifications\0") == "notifications"
    assert healthcheck.service_from_cmdline(b"python\0-m\0http.server\0") is None


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_probe_asks_the_port_from_the_settings(health_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAMMA_DIGEST_PORT", str(health_server))
    assert healthcheck.main(["healthcheck.py", "digest"]) == 0
    assert healthcheck.main(["healthcheck.py", "digest", "/readyz"]) == 1
    monkeypatch.setenv("GAMMA_DIGEST_PORT", "1")
    assert healthcheck.main(["healthcheck.py", "digest"]) == 1


def test_probe_module_lives_where_the_image_copies_it() -> None:
    assert Path(healthcheck.__file__).resolve() == ROOT / "deploy" / "healthcheck.py"
