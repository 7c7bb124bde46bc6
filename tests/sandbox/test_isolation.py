"""From session A's bash (real runtime, real Redis, scripted model), for each sandbox layer the machine
supports: other sessions, secrets, the network and the host stay out of reach."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from tests.sandbox.conftest import workspace
from tests.sandbox.support import bash, new_sid
from tests.support.stack import API_TOKEN, OTHER_TOKEN, SERVICE_TOKEN, Stack

pytestmark = pytest.mark.timeout(180)


def test_other_workspace_cannot_be_listed_read_or_written(sandbox_stack: Stack) -> None:
    a, b = new_sid(sandbox_stack, "iso-a"), new_sid(sandbox_stack, "iso-b")
    mine = bash(sandbox_stack, a, "echo mine > own.txt")  # A exists, is live and its bash works
    assert not mine["isError"] and (workspace(sandbox_stack, a) / "own.txt").read_text() == "mine\n", mine
    theirs = workspace(sandbox_stack, b)
    theirs.mkdir(parents=True)
    (theirs / "secret.txt").write_text("B-SECRET-CONTENT\n")
    absolute = str(theirs)
    sessions = str(theirs.parent.parent)
    attempts = []
    for base in (f"../../{b}/workspace", absolute):
        attempts += [f"ls -la {base}", f"cat {base}/secret.txt", f"echo PWNED > {base}/secret.txt",
                     f"echo PWNED > {base}/planted.txt", f"rm -f {base}/secret.txt"]
    attempts += [f"ls {sessions}", "ls ..", "ls ../..", "find / -name secret.txt 2>/dev/null"]
    res = bash(sandbox_stack, a, "; ".join(f"{c} 2>&1" for c in attempts) + "; echo END")
    assert res["text"].rstrip().endswith("END"), res["text"]
    assert "B-SECRET-CONTENT" not in res["text"], res["text"]
    assert b not in res["text"].replace(f"../../{b}", "").replace(absolute, ""), res["text"]
    assert (theirs / "secret.txt").read_text() == "B-SECRET-CONTENT\n"
    assert not (theirs / "planted.txt").exists()


def test_no_token_api_key_or_redis_url_in_env_or_proc(sandbox_stack: Stack) -> None:
    sid = new_sid(sandbox_stack, "env")
    res = bash(sandbox_stack, sid, "env; for f in /proc/*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null; "
               "cat /proc/1/environ 2>&1; echo END")
    text = res["text"]
    assert "END" in text and "PATH=" in text  # the command ran and printed its environment
    for secret in (API_TOKEN, OTHER_TOKEN, SERVICE_TOKEN, sandbox_stack.redis_url, "redis://", "REDIS_URL",
                   "GAMMA_SERVICE_TOKEN", "GAMMA_API_TOKENS", "OPENAI", "GAMMA_DATA_DIR"):
        assert secret not in text, f"{secret!r} leaked: {text}"


PROBE = """
import socket, sys
ok = []
for port in sys.argv[1:]:
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(1)
        s.connect(("127.0.0.1", int(port)))
        ok.append("OPEN " + port)
    except OSError as e:
        ok.append(f"closed {port} {e.errno}")
try:
    socket.getaddrinfo("example.com", 443)
    ok.append("DNS-RESOLVED")
except OSError as e:
    ok.append(f"dns failed {e}")
print("\\n".join(ok))
"""


def test_no_tcp_to_redis_proxy_or_loopback_and_no_dns(sandbox_stack: Stack, tmp_path: Path) -> None:
    redis_port = int(sandbox_stack.redis_url.rsplit(":", 1)[1].split("/")[0])
    listener = socket.create_server(("127.0.0.1", 0))  # a loopback port that certainly accepts
    ports = [redis_port, sandbox_stack.ports["proxy"], sandbox_stack.ports["runtime"], listener.getsockname()[1]]
    try:
        for port in ports:  # reachable from the host: the test is not vacuous
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        sid = new_sid(sandbox_stack, "net")
        (workspace(sandbox_stack, sid)).mkdir(parents=True)
        (workspace(sandbox_stack, sid) / "probe.py").write_text(PROBE)
        cmd = f"python3 probe.py {' '.join(map(str, ports))} 2>&1; " + \
            f"(exec 3<>/dev/tcp/127.0.0.1/{redis_port} && echo DEVTCP-OPEN) 2>&1; getent hosts example.com; echo END"
        res = bash(sandbox_stack, sid, cmd)
    finally:
        listener.close()
    text = res["text"]
    assert "END" in text and "closed" in text, text
    assert "OPEN " not in text and "DEVTCP-OPEN" not in text and "DNS-RESOLVED" not in text, text


def test_nothing_written_outside_the_workspace_survives(sandbox_stack: Stack) -> None:
    sid = new_sid(sandbox_stack, "out")
    mark = f"escape-{uuid.uuid4().hex[:8]}"
    data = Path(sandbox_stack.data_dir)
    targets = [f"/tmp/{mark}", f"$HOME/{mark}", f"$TMPDIR/{mark}", f"/var/tmp/{mark}", f"/etc/{mark}",
               f"/usr/{mark}", f"{data}/{mark}", f"/{mark}", f"/dev/shm/{mark}"]
    res = bash(sandbox_stack, sid, "; ".join(f"echo x > {t} 2>&1" for t in targets) + "; echo x > inside.txt; echo END")
    assert "END" in res["text"]
    assert (workspace(sandbox_stack, sid) / "inside.txt").exists()
    leftovers = [p for p in (Path("/tmp") / mark, Path("/var/tmp") / mark, Path("/etc") / mark, Path("/usr") / mark,
                             data / mark, Path("/") / mark, Path("/dev/shm") / mark) if p.exists()]
    leftovers += list(Path("/tmp").glob(f"gamma-sandbox-*/{mark}"))
    assert not leftovers, leftovers


def _sleepers(tag: str) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if tag in cmdline:
                out.append(f"{pid}: {cmdline}")
    return out


def _spawners(tag: str) -> str:
    py = (f"import os,time\nif os.fork()==0:\n    if os.fork()==0:\n        os.execvp('sleep',['sleep','{tag}'])\n"
          "    os._exit(0)\n")
    return (f"sleep {tag} & nohup sleep {tag} >/dev/null 2>&1 & (sleep {tag} &); "
            f"setsid sleep {tag} >/dev/null 2>&1 & python3 -c \"{py}\"; "
            f"(setsid nohup sleep {tag} >/dev/null 2>&1 &) ; echo spawned")


def test_background_children_daemons_and_double_forks_die_with_the_call(sandbox_stack: Stack) -> None:
    tag = f"{4000 + uuid.uuid4().int % 5000}.{uuid.uuid4().int % 1000}"
    sid = new_sid(sandbox_stack, "bg")
    res = bash(sandbox_stack, sid, _spawners(tag))
    assert "spawned" in res["text"], res
    assert _sleepers(f"sleep {tag}") == []


def test_background_children_die_after_a_timeout(sandbox_stack: Stack) -> None:
    tag = f"{4000 + uuid.uuid4().int % 5000}.{uuid.uuid4().int % 1000}"
    sid = new_sid(sandbox_stack, "bgt")
    res = bash(sandbox_stack, sid, _spawners(tag) + f"; sleep {tag}", timeout=2)
    assert res["details"].get("timedOut") is True and res["isError"], res
    assert _sleepers(f"sleep {tag}") == []
