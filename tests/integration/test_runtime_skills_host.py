"""What the skills rely on from the runtime (in-process runtime, real Redis, scripted model):
`show_gamma` with only `doc` reads the live deck, the bash tool can run the gml CLI through
`GAMMA_SKILLS_DIR`, and a variant's preloaded skills are recorded once and survive compaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.runtime.skillset.paths import skills_dir
from services.runtime.skillset.prompt import build_system_prompt
from services.runtime.skillset.skills import load_skills
from shared.contracts.streams.inbox import UserPrompt
from shared.redis import keys
from shared.storage.disk import atomic_write_json, session_paths
from tests.integration.runtime_inproc import InProc, inproc_worker
from tests.integration.runtime_support import call, done, script, transcript
from tests.support.polling import eventually


async def run(inp: InProc, sid: str, message: str) -> None:
    before = len(await inp.events(sid, "agent_end"))
    await inp.append(UserPrompt(session_id=sid, message=message))

    async def finished() -> bool:
        return not inp.worker.sessions[sid].state.running and len(await inp.events(sid, "agent_end")) > before
    await eventually(finished, timeout=30, what=f"{sid}: the run to finish")


def tool_results(data_dir: Path, sid: str, name: str) -> list[dict[str, Any]]:
    return [e["message"] for e in transcript(data_dir, sid)
            if e["type"] == "message" and e["message"]["role"] == "toolResult" and e["message"]["toolName"] == name]


async def test_show_gamma_with_only_doc_returns_the_live_deck_and_revision(redis_url: str, data_dir: Path) -> None:
    sid = "skdeck1"
    deck = {"title": "Q3 review", "theme": "ocean", "metadata": {}, "assets": [],
            "cards": [{"id": "card_1", "layout": "title", "blocks": [{"type": "heading", "text": "Edited by the user"}]}],
            "revision": 3}
    path = session_paths(data_dir, sid).document("q3")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, deck)
    async with inproc_worker(redis_url, data_dir) as inp:
        await inp.live(sid)
        await run(inp, sid, script({"tool_calls": [call("show_gamma", doc="q3")]}, done()))
    (result,) = tool_results(data_dir, sid, "show_gamma")
    text = result["content"][0]["text"]
    assert not result["isError"] and "revision 3" in text
    read_back = json.loads(text.split("\n", 1)[1])
    assert read_back["cards"] == deck["cards"] and read_back["title"] == "Q3 review"
    assert result["details"]["revision"] == 3 and result["details"]["ari"] == "gamma:file:q3"


async def test_bash_runs_the_gml_cli_through_gamma_skills_dir(redis_url: str, data_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GAMMA_SKILLS_DIR", raising=False)  # the tool sets it, not whoever started us
    sid = "skgml1"
    body = load_skills(skills_dir())["gml-authoring"].body
    example = body.split("```json\n", 1)[1].split("```", 1)[0]
    workspace = session_paths(data_dir, sid).workspace
    (workspace / "decks").mkdir(parents=True)
    (workspace / "decks" / "q3.json").write_text(example)
    command = 'python3 "$GAMMA_SKILLS_DIR/gml-cli/scripts/gml.py" validate decks/q3.json'
    async with inproc_worker(redis_url, data_dir) as inp:
        await inp.live(sid)
        await run(inp, sid, script({"tool_calls": [call("bash", command=command)]}, done()))
    (result,) = tool_results(data_dir, sid, "bash")
    assert result["content"][0]["text"].strip() == "OK 1 cards", result
    assert result["details"]["exitCode"] == 0 and not result["isError"]


async def test_preloaded_skills_recorded_once_and_restored_after_compaction(redis_url: str, data_dir: Path) -> None:
    sid = "skpre1"
    async with inproc_worker(redis_url, data_dir) as inp:
        await inp.redis.hset(keys.session_row(sid), mapping={"id": sid, "variant": "deck-generation", "model": "{}"})
        session = await inp.live(sid)
        assert session.agent.context.system_prompt == build_system_prompt("deck-generation", load_skills(skills_dir()))
        await run(inp, sid, "hello")
        await inp.worker.close(sid, "test")
        session = await inp.live(sid)  # a second wake records nothing again
        activations = [(e["name"], e.get("preloaded")) for e in transcript(data_dir, sid)
                       if e["type"] == "skill_activation"]
        assert activations == [("deck-generation", True), ("gml-authoring", True), ("gml-cli", True)]
        # Their bodies are in the system prompt, which compaction never touches: not restored twice.
        restored = [m.details["skill"] for m in session.turns.anchors() if m.custom_type == "gamma.active_skill"]
        assert restored == []
        prompt = session.agent.context.system_prompt
        assert all(prompt.count(f'<skill name="{name}"') == 2  # its catalog line and its preloaded body
                   for name in ("deck-generation", "gml-authoring", "gml-cli"))
