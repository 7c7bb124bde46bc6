"""Races a client can start at will: an abort landing as its run ends, writes landing while their
session wakes. Whatever the interleaving: no 5xx, and nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.integration.runtime_support import call, done, script
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries, new_session
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}


def client(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers=ALICE, timeout=60)


def idle(api: httpx.Client, sid: str) -> bool:
    row = api.get(f"/sessions/{sid}").json()
    return row.get("status") == "live" and not row.get("running")


@pytest.mark.timeout(240)
def test_an_abort_racing_the_end_of_its_run_is_never_a_server_error(module_stack: Stack) -> None:
    with client(module_stack) as api:
        sid = new_session(api)
        ask(api, sid, script(done("warm")))
        prompts: list[str] = []
        for i in range(12):
            step = {"tool_calls": [call("bash", command=f"sleep 0.0{i % 10}")]}
            resp = api.post(f"/sessions/{sid}/messages", json={"message": script(step, done(f"run {i}"))})
            assert resp.status_code == 202, resp.text
            prompts.append(resp.json()["prompt_id"])
            time.sleep(0.015 * (i % 6))  # the abort lands before, during or right at the end of the run
            aborted = api.post(f"/sessions/{sid}/abort")
            assert aborted.status_code == 200, aborted.text
            wait_sync(lambda: idle(api, sid), timeout=60, what="the run over")
        recorded = {e.get("promptId") for e in entries(api, sid)}
        assert set(prompts) <= recorded  # every accepted prompt is in the transcript, aborted or not
        final = ask(api, sid, script(done("still fine")))  # the session goes on as usual
        assert final


async def _put_until_applied(http: httpx.AsyncClient, sid: str, name: str, body: bytes) -> list[int]:
    statuses = []
    for _ in range(40):
        resp = await http.put(f"/sessions/{sid}/workspace/files/{name}", content=body)
        statuses.append(resp.status_code)
        if resp.status_code != 409:  # 409: the session is waking, retry once it is live
            return statuses
        await asyncio.sleep(0.1)
    return statuses


@pytest.mark.timeout(300)
def test_writes_racing_a_wake_are_applied_or_refused_never_lost(module_stack: Stack) -> None:
    with client(module_stack) as api:
        sid = new_session(api)
        ask(api, sid, script(done("warm")))

        async def race(round_: int) -> list[list[int]]:
            async with httpx.AsyncClient(base_url=module_stack.url(), headers=ALICE, timeout=60) as http:
                wake = http.post(f"/sessions/{sid}/messages", json={"message": script(done(f"woke {round_}"))})
                puts = [_put_until_applied(http, sid, f"r{round_}/f{i}.txt", f"{round_}-{i}".encode()) for i in range(8)]
                woke, *statuses = await asyncio.gather(wake, *puts)
                assert woke.status_code == 202, woke.text
                return statuses

        for round_ in range(3):
            assert api.post(f"/sessions/{sid}/suspend").status_code == 200
            wait_sync(lambda: api.get(f"/sessions/{sid}").json().get("status") == "dormant", timeout=60,
                      what="dormant")
            for i, statuses in enumerate(asyncio.run(race(round_))):
                assert all(s < 500 for s in statuses) and statuses[-1] == 200, statuses
                got = api.get(f"/sessions/{sid}/workspace/files/r{round_}/f{i}.txt")
                assert got.status_code == 200 and got.content == f"{round_}-{i}".encode()
            wait_sync(lambda: idle(api, sid), timeout=60, what="the woken run over")
