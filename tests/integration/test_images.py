"""Images reach the model (docs/architecture.md "Images"), through the five real services and a
stand-in provider that records the request bodies it receives (tests/support/recording_model.py):
an attached image is an image part of its user message and a `read` of an image is in the tool's
output (Responses) or the user part after the tool messages (Chat), bytes identical; every request
is valid for the `openai` package's own request types; the transcript holds references, not base64;
a wake sends the same bytes; bad attachments are a 4xx naming them and nothing is sent; images no
transcript entry names are collected when the session closes, a fork keeps its branch's."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.contract.test_model_api import CHAT, CHAT_PLAIN, RESPONSES, RESPONSES_PLAIN, assert_exact
from tests.integration.runtime_support import Driver, call, done, script
from tests.support.polling import wait_sync
from tests.support.recording_model import Recorded, RecordingModel
from tests.support.stack import API_TOKEN, OTHER_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)


@dataclass
class Env:
    stack: Stack
    model: RecordingModel
    http: httpx.Client
    d: Driver
    data_dir: Path


@pytest.fixture(scope="module")
def env(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    model = RecordingModel().start()
    data_dir = tmp_path_factory.mktemp("images")
    stack = Stack(redis_url=module_redis_url, data_dir=data_dir, env_overrides={**model.env(), "GAMMA_ATTACHMENTS_MAX": "3"})
    stack.start()
    http = httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=60)
    try:
        yield Env(stack, model, http, Driver(stack.redis_url), data_dir)
    finally:
        http.close()
        stack.stop()
        model.stop()


def png(width: int, height: int, colour: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "PNG")
    return out.getvalue()


def gradient_jpeg(width: int, height: int) -> bytes:
    im = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    out = io.BytesIO()
    im.save(out, "JPEG", quality=70)
    return out.getvalue()


def image_urls(value: Any) -> list[str]:
    """Every image data URL in a request part, in order, whichever API's shape carries it."""
    if isinstance(value, list):
        return [u for v in value for u in image_urls(v)]
    if not isinstance(value, dict):
        return []
    if value.get("type") == "input_image":
        return [value["image_url"]]
    if value.get("type") == "image_url":
        return [value["image_url"]["url"]]
    return [u for v in value.values() for u in image_urls(v)]


def decoded(url: str) -> bytes:
    head, _, data = url.partition(",")
    assert head.startswith("data:image/") and head.endswith(";base64")
    return base64.b64decode(data)


def new_session(e: Env, api: str) -> str:
    resp = e.http.post("/sessions", json={"model": {"api": api}})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def put(e: Env, sid: str, path: str, data: bytes) -> None:
    resp = e.http.put(f"/sessions/{sid}/workspace/files/{path}", content=data)
    assert resp.status_code == 200, resp.text


def run(e: Env, sid: str, message: str, **body: Any) -> None:
    before = len(e.d.message_users(sid))
    resp = e.http.post(f"/sessions/{sid}/messages", json={"message": message, **body})
    assert resp.status_code == 202, resp.text
    wait_sync(lambda: len(e.d.message_users(sid)) > before, timeout=90, what="the run's answer")


def validate(requests: list[Recorded]) -> None:
    for r in requests:
        assert_exact(RESPONSES if r.api == "responses" else CHAT, r.body)


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_attached_and_read_images_reach_the_model_and_replay_after_a_wake(env: Env, api: str) -> None:
    since = len(env.model.agent_requests())
    sid = new_session(env, api)
    photo, chart = png(320, 200, (200, 30, 30)), png(400, 300, (30, 30, 200))
    put(env, sid, "photo.png", photo)
    put(env, sid, "renders/chart.png", chart)
    put(env, sid, "notes.txt", b"plain notes\n")

    run(env, sid, script({"tool_calls": [call("read", path="renders/chart.png")]}, done("seen")),
        attachments=["photo.png", "notes.txt"])
    sent = env.model.agent_requests()[since:]
    assert sent and all(r.api == api for r in sent)
    validate(sent)
    last = sent[-1].body
    if api == "responses":
        user = next(i for i in last["input"] if i.get("role") == "user" and isinstance(i["content"], list))
        (output,) = [i["output"] for i in last["input"] if i.get("type") == "function_call_output"]
        assert isinstance(output, list) and output[0]["type"] == "input_text"
        assert [decoded(u) for u in image_urls(output)] == [chart]
    else:
        messages = last["messages"]
        user = next(m for m in messages if m["role"] == "user" and "script:" in str(m["content"]))
        tool_at = next(i for i, m in enumerate(messages) if m["role"] == "tool")
        assert isinstance(messages[tool_at]["content"], str)  # a tool message is text only
        after = messages[tool_at + 1]
        assert after["role"] == "user" and [decoded(u) for u in image_urls(after)] == [chart]
        assert after["content"][0]["text"].startswith("The image(s) returned by the `read` tool call")
    assert [decoded(u) for u in image_urls(user)] == [photo]  # bytes identical
    # (the system message defines the tag among the harness blocks: not the note)
    note = [x for x in (last.get("input") or last.get("messages"))
            if x.get("role") != "system" and "<attachments>" in str(x.get("content"))]
    assert len(note) == 1 and '<file path="notes.txt" type="text/plain" bytes="12"/>' in str(note[0]["content"])
    # The harness's channel: developer for Responses, user for Chat on a server that is not OpenAI's.
    assert note[0]["role"] == ("developer" if api == "responses" else "user")

    transcript = (env.data_dir / "sessions" / sid / "transcript.jsonl").read_text()
    assert "base64" not in transcript and base64.b64encode(photo[:48]).decode()[:40] not in transcript
    assert len(list((env.data_dir / "sessions" / sid / ".images").iterdir())) == 2

    # A wake rebuilds the request from the transcript and the stored images: the same bytes.
    assert env.http.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: not env.d.live(sid), timeout=30, what="dormant")
    urls_before = image_urls(last.get("input") or last.get("messages"))
    run(env, sid, "thanks")
    after_wake = env.model.agent_requests()[-1]
    validate([after_wake])
    assert image_urls(after_wake.body.get("input") or after_wake.body.get("messages")) == urls_before

    assert "base64" not in (env.data_dir / "sessions" / sid / "transcript.jsonl").read_text()


def message_with(request: Recorded, fragment: str) -> dict[str, Any]:
    items = request.body.get("input") or request.body.get("messages")
    return next(m for m in items if m.get("role") == "user" and fragment in str(m.get("content")))


def test_compaction_keeps_the_recent_image_exactly_and_the_summarizer_sees_the_summarized_one(env: Env) -> None:
    """The cut falls between two images (the later one is most of the recent budget): the kept image
    is sent again in the same message at the same place with the same bytes; the summarized one's
    part leaves the request, and the summarizer's request carries it as an image part."""
    sid = new_session(env, "responses")
    early, late = png(64, 48, (200, 120, 10)), png(1024, 768, (10, 160, 90))  # within the limits: bytes kept
    put(env, sid, "early.png", early)
    put(env, sid, "late.png", late)
    run(env, sid, script(done("first seen")), attachments=["early.png"])
    run(env, sid, script(done("second seen")), attachments=["late.png"])
    before = message_with(env.model.agent_requests()[-1], "second seen")
    assert [decoded(u) for u in image_urls(before)] == [late]

    summaries_since = len(env.model.summary_requests())
    assert env.http.post(f"/sessions/{sid}/compact", json={}).status_code == 200
    wait_sync(lambda: any(e["type"] == "compaction" for e in env.http.get(f"/sessions/{sid}/transcript").json()[
        "entries"]), timeout=60, what="the compaction entry")
    run(env, sid, "and now?")
    after = env.model.agent_requests()[-1]
    validate([after])
    assert message_with(after, "second seen") == before  # same message, same parts, same bytes
    urls = image_urls(after.body["input"])
    assert [decoded(u) for u in urls] == [late]  # the summarized image's part is gone
    assert not [i for i in after.body["input"] if i.get("role") == "user" and "first seen" in str(i["content"])]

    (summary,) = env.model.summary_requests()[summaries_since:]
    validate_summary(summary)
    assert [decoded(u) for u in image_urls(summary.body["input"])] == [early]
    assert '[Image]: "early.png" (image/png, 64x48, attached as image #1)' in summary.text()
    assert '[Image]: "late.png"' not in summary.text()  # kept, so not summarized


def validate_summary(request: Recorded) -> None:
    assert_exact(RESPONSES_PLAIN if request.api == "responses" else CHAT_PLAIN, request.body)


def test_a_12_megapixel_jpeg_is_downscaled_within_the_limits(env: Env) -> None:
    sid = new_session(env, "responses")
    put(env, sid, "photo.jpg", gradient_jpeg(4000, 3000))
    run(env, sid, "Here is the photo.", attachments=["photo.jpg"])
    (url,) = image_urls(env.model.agent_requests()[-1].body["input"])
    with Image.open(io.BytesIO(decoded(url))) as sent:
        assert max(sent.size) <= 2048 and min(sent.size) <= 768
        assert sent.size == (1024, 768)  # the aspect ratio kept


def test_bad_attachments_are_refused_by_name_and_nothing_is_sent(env: Env) -> None:
    sid = new_session(env, "responses")
    put(env, sid, "ok.png", png(10, 10, (0, 0, 0)))
    put(env, sid, "broken.png", png(64, 64, (1, 2, 3))[:60] + b"\x00" * 40)
    workspace = env.data_dir / "sessions" / sid / "workspace"
    with (workspace / "huge.png").open("wb") as fh:  # as a command in the sandbox could make it
        fh.write(png(8, 8, (0, 0, 0)))
        fh.truncate(50 * 1024 * 1024)
    (env.data_dir / "sessions" / sid / "outside.png").write_bytes(png(8, 8, (0, 0, 0)))
    requests_before = len(env.model.agent_requests())
    cases = {
        "broken.png": (422, "broken.png"),
        "huge.png": (413, "huge.png"),
        "missing.png": (404, "missing.png"),
        "../outside.png": (400, "../outside.png"),
        "/etc/passwd": (400, "/etc/passwd"),
    }
    for path, (status, named) in cases.items():
        resp = env.http.post(f"/sessions/{sid}/messages", json={"message": "look", "attachments": ["ok.png", path]})
        assert resp.status_code == status, (path, resp.text)
        assert named in resp.text, resp.text
    resp = env.http.post(f"/sessions/{sid}/messages", json={"message": "look", "attachments": ["ok.png"] * 4})
    assert resp.status_code == 422 and "at most 3" in resp.text
    assert env.http.get(f"/sessions/{sid}").json()["status"] == "dormant"  # no wake, no prompt
    assert len(env.model.agent_requests()) == requests_before
    assert not (env.data_dir / "sessions" / sid / ".images").exists()  # a refused message stores nothing


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_corrupt_image_read_is_an_error_result(env: Env, api: str) -> None:
    sid = new_session(env, api)
    put(env, sid, "broken.png", png(64, 64, (1, 2, 3))[:60] + b"\x00" * 40)
    run(env, sid, script({"tool_calls": [call("read", path="broken.png")]}, done("checked")))
    last = env.model.agent_requests()[-1]
    validate([last])
    assert image_urls(last.body.get("input") or last.body.get("messages")) == []
    assert "Cannot show the image broken.png" in last.text()


def test_a_50_mb_image_read_is_an_error_result_and_a_50_mb_file_attached_is_413(env: Env) -> None:
    """Past GAMMA_IMAGE_MAX_SOURCE_BYTES (20 MB) a `read` image is an error result, nothing stored;
    past GAMMA_ATTACHMENTS_MAX_BYTES (40 MB) a message's attachments are a 413 naming the file."""
    sid = new_session(env, "responses")
    workspace = env.data_dir / "sessions" / sid / "workspace"
    put(env, sid, "small.txt", b"x")
    for name, head in (("huge.png", png(8, 8, (0, 0, 0))), ("huge.bin", b"\x00not an image")):
        with (workspace / name).open("wb") as fh:  # as a command in the sandbox could make them
            fh.write(head)
            fh.truncate(50 * 1024 * 1024)
    resp = env.http.post(f"/sessions/{sid}/messages", json={"message": "look", "attachments": ["small.txt", "huge.bin"]})
    assert resp.status_code == 413 and "huge.bin" in resp.text and str(40 * 1024 * 1024) in resp.text, resp.text
    run(env, sid, script({"tool_calls": [call("read", path="huge.png")]}, done("checked")))
    last = env.model.agent_requests()[-1]
    validate([last])
    assert image_urls(last.body["input"]) == []
    (output,) = [i["output"] for i in last.body["input"] if i.get("type") == "function_call_output"]
    assert "Cannot show the image huge.png" in str(output) and "the limit is 20971520 bytes" in str(output)
    assert not (env.data_dir / "sessions" / sid / ".images").exists()


def test_show_file_with_look_returns_the_image_and_opens_the_tab(env: Env) -> None:
    sid = new_session(env, "responses")
    card = png(200, 120, (10, 200, 10))
    put(env, sid, "renders/card1.png", card)
    run(env, sid, script({"tool_calls": [call("show_file", path="renders/card1.png", look=True)]}, done("shown")))
    last = env.model.agent_requests()[-1]
    validate([last])
    (output,) = [i["output"] for i in last.body["input"] if i.get("type") == "function_call_output"]
    assert "Opened file:renders/card1.png in tab" in output[0]["text"]
    assert [decoded(u) for u in image_urls(output)] == [card]


def test_an_attached_image_is_served_by_hash_to_its_owner_only(env: Env) -> None:
    sid = new_session(env, "responses")
    put(env, sid, "pic.png", png(64, 48, (10, 200, 30)))
    run(env, sid, script(done("seen")), attachments=["pic.png"])
    stored = list((env.data_dir / "sessions" / sid / ".images").iterdir())
    assert len(stored) == 1
    digest = stored[0].name
    resp = env.http.get(f"/sessions/{sid}/images/{digest}")
    assert resp.status_code == 200 and resp.headers["content-type"] == "image/png"
    assert resp.headers["x-content-type-options"] == "nosniff" and resp.content == stored[0].read_bytes()
    with Image.open(io.BytesIO(resp.content)) as im:
        assert im.size == (64, 48)
    other = httpx.get(env.stack.url() + f"/sessions/{sid}/images/{digest}",
                      headers={"Authorization": f"Bearer {OTHER_TOKEN}"}, timeout=30)
    assert other.status_code == 404 and other.content != resp.content
    assert env.http.get(f"/sessions/{sid}/images/{'0' * 64}").status_code == 404
    for bad in (digest.upper(), digest[:63], "..%2F..%2Ftranscript.jsonl", digest + "0"):
        assert env.http.get(f"/sessions/{sid}/images/{bad}").status_code in (404, 422), bad
    assert httpx.get(env.stack.url() + f"/sessions/{sid}/images/{digest}", timeout=30).status_code == 401


def user_entry(e: Env, sid: str, fragment: str) -> dict[str, Any]:
    entries = e.http.get(f"/sessions/{sid}/transcript", params={"tree": 1}).json()["entries"]
    return next(x for x in entries if x["type"] == "message" and x["message"]["role"] == "user"
                and fragment in str(x["message"]["content"]))


def test_unreferenced_images_are_collected_at_close_and_referenced_ones_stay(env: Env) -> None:
    """An image no entry of any branch names goes when the session closes (past the grace); one on a
    branch a rewind left stays; a fork has its branch's images, unaffected by the source's collection."""
    sid = new_session(env, "responses")
    shots = {name: png(40 + i, 30, (10 * i, 80, 200)) for i, name in enumerate(("a", "b", "c", "d"))}
    digest = {name: hashlib.sha256(data).hexdigest() for name, data in shots.items()}
    for name, data in shots.items():
        put(env, sid, f"{name}.png", data)
    images = env.data_dir / "sessions" / sid / ".images"
    run(env, sid, script({"tool_calls": [call("bash", command="printf x > x.txt")]}, done("hello")))
    run(env, sid, script(done("with a")), attachments=["a.png"])
    # An edit: the message with a.png stays on the abandoned branch of the tree.
    run(env, sid, script(done("with b")), attachments=["b.png"], edit_of=user_entry(env, sid, "with a")["id"])
    assert user_entry(env, sid, "with b")["parentId"] == user_entry(env, sid, "with a")["parentId"]
    # Refused after its attachments were stored (no such run): c.png is stored, and nothing names it.
    refused = env.http.post(f"/sessions/{sid}/messages", json={"message": "late", "attachments": ["c.png"],
                                                              "expected_run_id": "run_gone", "on_busy": "steer"})
    assert refused.status_code == 409, refused.text
    assert {p.name for p in images.iterdir()} == {digest["a"], digest["b"], digest["c"]}
    fork = env.http.post(f"/sessions/{sid}/fork", json={"entry_id": user_entry(env, sid, "with b")["id"]})
    assert fork.status_code == 201, fork.text
    forked = str(fork.json()["id"])
    assert {p.name for p in (env.data_dir / "sessions" / forked / ".images").iterdir()} == {digest["b"]}
    two_hours_ago = time.time() - 7200
    for path in images.iterdir():
        os.utime(path, (two_hours_ago, two_hours_ago))
    refused = env.http.post(f"/sessions/{sid}/messages", json={"message": "late", "attachments": ["d.png"],
                                                              "expected_run_id": "run_gone", "on_busy": "steer"})
    assert refused.status_code == 409, refused.text  # d.png: unreferenced too, but within the grace

    assert env.http.post(f"/sessions/{sid}/suspend").status_code == 200  # the close collects
    assert {p.name for p in images.iterdir()} == {digest["a"], digest["b"], digest["d"]}
    since = len(env.model.agent_requests())
    run(env, forked, "what was in the picture?")
    (request,) = env.model.agent_requests()[since:]
    assert [decoded(u) for u in image_urls(request.body["input"])] == [shots["b"]]
    assert env.http.get(f"/sessions/{sid}/images/{digest['c']}").status_code == 404
    assert env.http.get(f"/sessions/{sid}/images/{digest['a']}").content == shots["a"]


def tool_images(request: Recorded, tool_call_id: str) -> list[bytes]:
    (output,) = [i["output"] for i in request.body["input"]
                 if i.get("type") == "function_call_output" and i["call_id"] == tool_call_id]
    return [decoded(u) for u in image_urls(output)]


def read_call(requests: list[Recorded], path: str) -> tuple[str, Recorded]:
    """The id of the agent's `read` of `path`, and the first request carrying its output."""
    for r in requests:
        for item in r.body["input"]:
            if item.get("type") == "function_call" and item["name"] == "read" and path in item["arguments"]:
                return str(item["call_id"]), r
    raise AssertionError(f"no read of {path}")


def finished(e: Env, sid: str, message: str) -> None:
    """A workflow's run, waited for to its blocking message (it sends a progress message before)."""
    before = len([m for m in e.d.message_users(sid) if m["block_on_user"]])
    resp = e.http.post(f"/sessions/{sid}/messages", json={"message": message})
    assert resp.status_code == 202, resp.text
    wait_sync(lambda: len([m for m in e.d.message_users(sid) if m["block_on_user"]]) > before, timeout=150,
              what="the workflow's completion")


def test_the_workflows_inspect_steps_render_the_cards_and_look_at_them(env: Env) -> None:
    """deck-generation and gml-editing (the scripted model's policies, scripted/workflows.py) render
    the deck with `gml render --png` in the sandbox and `read` a card: the next request carries the
    card as an image in the tool output, the PNG the sandbox drew."""
    sid = new_session(env, "responses")
    since = len(env.model.agent_requests())
    finished(env, sid, "Create a presentation about tides")
    call_id, request = read_call(env.model.agent_requests()[since:], "png/card_1.png")
    validate([request])
    (card,) = tool_images(request, call_id)
    workspace = env.data_dir / "sessions" / sid / "workspace"
    assert card == (workspace / "png" / "card_1.png").read_bytes()
    with Image.open(io.BytesIO(card)) as im:
        assert im.size == (1280, 720)

    since = len(env.model.agent_requests())
    finished(env, sid, "Retitle card 2, please")
    call_id, request = read_call(env.model.agent_requests()[since:], "edits/deck/png/card_2.png")
    assert tool_images(request, call_id) == [(workspace / "edits" / "deck" / "png" / "card_2.png").read_bytes()]
