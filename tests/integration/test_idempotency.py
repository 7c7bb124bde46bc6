"""`Idempotency-Key` on the proxy's POSTs, against the real services (docs/architecture.md "Session
lifecycle"): a retry answers the stored response and does nothing again, another body is 422, a key
still in flight is 409, a dead proxy's key frees itself, keys survive a proxy restart."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator

import httpx
import pytest
import redis

from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, OTHER_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
LEASE_S = 15


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_IDEMPOTENCY_LEASE_S": str(LEASE_S), "GAMMA_REPLY_TIMEOUT_S": "20"}


@pytest.fixture(scope="module")
def bob(module_stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=module_stack.url(), headers={"Authorization": f"Bearer {OTHER_TOKEN}"},
                      timeout=60) as client:
        yield client


def keyed(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {API_TOKEN}", "Idempotency-Key": key}


def user_messages(module_stack: Stack, sid: str) -> list[str]:
    path = module_stack.data_dir / "sessions" / sid / "transcript.jsonl"
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e["message"]["content"] for e in entries if e["type"] == "message" and e["message"]["role"] == "user"]


def agent_replied(api: httpx.Client, sid: str, fragment: str) -> bool:
    return any(fragment in e["text"] for e in api.get(f"/sessions/{sid}/preview").json()["transcript"]
               if e["kind"] == "message_user")


def test_a_retried_message_runs_once_and_answers_the_same(api: httpx.Client, r: redis.Redis,
                                                         module_stack: Stack) -> None:
    sid = api.post("/sessions").json()["id"]
    body = {"message": "only once please"}
    first = api.post(f"/sessions/{sid}/messages", json=body, headers=keyed("k-msg-1"))
    # the same object serialised another way is the same request
    second = api.post(f"/sessions/{sid}/messages", content=json.dumps(body, indent=2),
                      headers={**keyed("k-msg-1"), "Content-Type": "application/json"})
    assert first.status_code == second.status_code == 202, (first.text, second.text)
    assert first.content == second.content
    assert second.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    wait_sync(lambda: agent_replied(api, sid, "only once please"), timeout=60, what="the reply")
    wait_sync(lambda: not api.get(f"/sessions/{sid}").json()["running"], timeout=30, what="the run's end")
    third = api.post(f"/sessions/{sid}/messages", json=body, headers=keyed("k-msg-1"))
    assert third.content == first.content
    assert user_messages(module_stack, sid) == ["only once please"]
    # The inbox itself is trimmed once its entries are acked (GAMMA_STREAM_TRIM_INTERVAL_S): the
    # transcript above is the record that the prompt ran once.
    # another body, or another route, with the key: 422, nothing queued
    other = api.post(f"/sessions/{sid}/messages", json={"message": "something else"}, headers=keyed("k-msg-1"))
    assert other.status_code == 422 and "Idempotency-Key" in other.json()["error"]
    elsewhere = api.post(f"/sessions/{sid}/abort", headers=keyed("k-msg-1"))
    assert elsewhere.status_code == 422
    assert user_messages(module_stack, sid) == ["only once please"]  # nothing more ran (the inbox is trimmed)
    # without the header, or with a fresh key, the same body runs again
    assert api.post(f"/sessions/{sid}/messages", json=body, headers=keyed("k-msg-2")).status_code == 202
    wait_sync(lambda: user_messages(module_stack, sid).count("only once please") == 2, timeout=60,
              what="the second prompt")


def test_create_session_is_idempotent_per_user(api: httpx.Client, bob: httpx.Client) -> None:
    before = {s["id"] for s in api.get("/sessions").json()["sessions"]}
    first = api.post("/sessions", json={"variant": "base"}, headers=keyed("k-create"))
    second = api.post("/sessions", json={"variant": "base"}, headers=keyed("k-create"))
    assert first.status_code == 201 and first.content == second.content
    after = {s["id"] for s in api.get("/sessions").json()["sessions"]}
    assert after - before == {first.json()["id"]}
    # bob's key of the same name is his own
    theirs = bob.post("/sessions", json={"variant": "base"}, headers={"Idempotency-Key": "k-create"})
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]
    assert theirs.json()["owner"] == "bob"


def test_a_bad_key_is_400(api: httpx.Client) -> None:
    for bad in ("", "x" * 256, "tab\there"):
        res = api.post("/sessions", headers={"Idempotency-Key": bad})
        assert res.status_code == 400, (bad, res.text)


def _live_session(api: httpx.Client) -> str:
    sid = str(api.post("/sessions").json()["id"])
    assert api.post(f"/sessions/{sid}/messages", json={"message": "wake up"}).status_code == 202
    wait_sync(lambda: agent_replied(api, sid, "wake up"), timeout=60, what="the wake's reply")
    wait_sync(lambda: not api.get(f"/sessions/{sid}").json()["running"], timeout=30, what="the run's end")
    return sid


def _in_background(api: httpx.Client, path: str, key: str) -> tuple[threading.Thread, list[httpx.Response | Exception]]:
    out: list[httpx.Response | Exception] = []

    def call() -> None:
        try:
            out.append(api.post(path, headers=keyed(key)))
        except Exception as exc:  # noqa: BLE001 - a killed proxy: the test checks what it expects
            out.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread, out


def _marker(r: redis.Redis) -> bool:
    return any(b"in_flight" in (r.get(k) or b"") for k in r.scan_iter(match="gamma:idem:{alice}:*"))


def test_a_key_in_flight_is_409_then_the_stored_answer(api: httpx.Client, r: redis.Redis,
                                                       module_stack: Stack) -> None:
    sid = _live_session(api)
    module_stack.kill("runtime", signal.SIGSTOP)  # the forwarded suspend waits for its reply
    try:
        thread, out = _in_background(api, f"/sessions/{sid}/suspend", "k-suspend")
        wait_sync(lambda: _marker(r), timeout=10, interval=0.02, what="the in-flight marker")
        concurrent = api.post(f"/sessions/{sid}/suspend", headers=keyed("k-suspend"))
        assert concurrent.status_code == 409 and "in progress" in concurrent.json()["error"]
    finally:
        module_stack.kill("runtime", signal.SIGCONT)
    thread.join(timeout=40)
    [first] = out
    assert isinstance(first, httpx.Response) and first.status_code == 200, first
    again = api.post(f"/sessions/{sid}/suspend", headers=keyed("k-suspend"))
    assert again.status_code == 200 and again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"


def test_a_proxy_killed_mid_request_frees_the_key_and_keys_survive_a_restart(
        api: httpx.Client, r: redis.Redis, module_stack: Stack) -> None:
    sid = _live_session(api)
    done = api.post(f"/sessions/{sid}/compact", headers=keyed("k-compact-done"))
    module_stack.kill("runtime", signal.SIGSTOP)
    try:
        thread, _ = _in_background(api, f"/sessions/{sid}/abort", "k-abort-dies")
        wait_sync(lambda: _marker(r), timeout=10, interval=0.02, what="the in-flight marker")
        module_stack.kill("proxy")  # kill -9 while the abort waits for the runtime
        thread.join(timeout=10)
    finally:
        module_stack.kill("runtime", signal.SIGCONT)
    module_stack.start("proxy")
    assert api.post(f"/sessions/{sid}/abort", headers=keyed("k-abort-dies")).status_code == 409  # still leased
    retried = wait_sync(lambda: (res := api.post(f"/sessions/{sid}/abort", headers=keyed("k-abort-dies"))).status_code
                        == 200 and res, timeout=LEASE_S + 20, interval=0.5, what="the key freed by its lease")
    assert retried.json()["aborted"] is False and "Idempotent-Replayed" not in retried.headers
    replayed = api.post(f"/sessions/{sid}/compact", headers=keyed("k-compact-done"))  # stored before the restart
    assert replayed.status_code == done.status_code and replayed.content == done.content
    assert replayed.headers["Idempotent-Replayed"] == "true"
    for key in r.scan_iter(match="gamma:idem:{alice}:*"):
        assert 0 < r.pttl(key) <= 24 * 3600 * 1000  # every key expires


def test_keys_are_bounded_per_user(r: redis.Redis, stack_factory) -> None:
    stack = stack_factory(GAMMA_IDEMPOTENCY_MAX_KEYS="10")
    with httpx.Client(base_url=stack.url(), timeout=30) as client:
        first = client.post("/sessions", headers=keyed("k-bound-0"))
        for n in range(1, 15):
            assert client.post("/sessions", headers=keyed(f"k-bound-{n}")).status_code == 201
        plain = redis.Redis.from_url(stack.redis_url)
        assert plain.zcard("gamma:idem:{alice}") == 10
        assert len(list(plain.scan_iter(match="gamma:idem:{alice}:*"))) == 10
        # the oldest key went first: its retry creates again
        again = client.post("/sessions", headers=keyed("k-bound-0"))
        assert again.status_code == 201 and again.json()["id"] != first.json()["id"]
        plain.close()
