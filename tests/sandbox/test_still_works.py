"""What must keep working inside the sandbox (each layer): the agent's own files both ways, python3,
the gml-cli skill script, the artifact changes bash publishes; and how a runtime tells its layer."""

from __future__ import annotations

import hashlib
import json
import urllib.request

import pytest
import redis
from PIL import Image

from services.runtime.skillset.paths import skills_dir
from services.runtime.skillset.skills import load_skills
from shared.redis import keys
from tests.integration.runtime_support import call, stream_payloads
from tests.sandbox.conftest import workspace
from tests.sandbox.support import bash, new_sid, results, run_tools
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(120)


def test_own_files_python3_and_published_artifact_changes(sandbox_stack: Stack) -> None:
    sid = new_sid(sandbox_stack, "own")
    run_tools(sandbox_stack, sid, call("write", path="notes/a.txt", content="from the write tool\n"))
    res = bash(sandbox_stack, sid, "cat notes/a.txt && echo appended >> notes/a.txt && "
               "python3 -c 'import sys; open(\"made.txt\", \"w\").write(\"py %d\" % sys.version_info[0])' && "
               "mkdir -p out && cp notes/a.txt out/copy.txt && rm -f gone.txt && ls -R")
    assert not res["isError"], res
    assert "from the write tool" in res["text"] and "made.txt" in res["text"]
    ws = workspace(sandbox_stack, sid)
    assert (ws / "notes/a.txt").read_text() == "from the write tool\nappended\n"
    assert (ws / "made.txt").read_text() == "py 3"
    run_tools(sandbox_stack, sid, call("read", path="made.txt"))
    assert "py 3" in json.dumps(results(sandbox_stack, sid, "read")[-1])
    r = redis.Redis.from_url(sandbox_stack.redis_url)
    changes = {c["ref"]: c for c in stream_payloads(r, keys.ARTIFACT_CHANGES) if c.get("session_id") == sid}
    made = next(c for ref, c in changes.items() if ref.endswith("made.txt"))
    # The change names a content blob (the digest consumes it), never a copy of the bytes.
    assert made["sha256"] == hashlib.sha256(b"py 3").hexdigest() and made["size"] == 4 and made["actor"] == "agent"
    assert any(ref.endswith("out/copy.txt") for ref in changes) and any(ref.endswith("notes/a.txt") for ref in changes)


def test_the_gml_cli_skill_script_runs(sandbox_stack: Stack) -> None:
    sid = new_sid(sandbox_stack, "gml")
    body = load_skills(skills_dir())["gml-authoring"].body
    example = body.split("```json\n", 1)[1].split("```", 1)[0]
    ws = workspace(sandbox_stack, sid)
    (ws / "decks").mkdir(parents=True)
    (ws / "decks" / "q3.json").write_text(example)
    res = bash(sandbox_stack, sid, 'python3 "$GAMMA_SKILLS_DIR/gml-cli/scripts/gml.py" validate decks/q3.json')
    assert res["text"].strip() == "OK 1 cards", res
    assert res["details"]["exitCode"] == 0 and res["details"]["sandbox"] == sandbox_stack.layer
    # render --png imports Pillow from the sandbox's own python3 (the venv is not visible in there)
    png = bash(sandbox_stack, sid, 'python3 "$GAMMA_SKILLS_DIR/gml-cli/scripts/gml.py" render decks/q3.json --png png')
    assert png["details"]["exitCode"] == 0 and png["text"].strip() == "png/card_1.png", png
    with Image.open(ws / "png" / "card_1.png") as im:
        assert im.format == "PNG" and im.size == (1280, 720)
    denied = bash(sandbox_stack, sid, 'echo x > "$GAMMA_SKILLS_DIR/planted" 2>&1; echo rc=$?')
    assert "rc=0" not in denied["text"] and not (skills_dir() / "planted").exists()


def test_readyz_metrics_and_log_name_the_layer(sandbox_stack: Stack) -> None:
    layer = sandbox_stack.layer
    with urllib.request.urlopen(sandbox_stack.url("runtime") + "/readyz", timeout=5) as resp:
        body = json.loads(resp.read())
    assert body["ready"] is True and body["details"]["sandbox"]["layer"] == layer
    assert set(body["details"]["sandbox"]) <= {"layer", "memoryCgroup"}
    with urllib.request.urlopen(sandbox_stack.url("runtime") + "/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    assert f'gamma_sandbox_layer{{layer="{layer}"}} 1.0' in metrics
    assert 'gamma_sandbox_layer{layer="off"} 0.0' in metrics
    logged = [json.loads(line) for line in sandbox_stack.log("runtime").splitlines() if '"sandbox_layer"' in line]
    assert logged and logged[0]["layer"] == layer
