"""schemathesis against the proxy's generated OpenAPI document: no 5xx for any generated request.

Every operation runs twice per example: as generated (random session ids: the 401/404/422 paths), and
again on a real dormant session of the caller (the dormant disk paths with generated bodies, headers
and paths). Bounded by `max_examples`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}
# Not re-run on the real session: a message would wake it (the runs belong to the live tests), the
# events stream of an existing session never ends by design, and a DELETE would erase it. An AG-UI run
# is a message and its stream (tests/integration/test_agui.py has its refusals on real sessions).
NOT_ON_REAL_SESSION = {("POST", "/sessions/{sid}/messages"), ("GET", "/sessions/{sid}/events"),
                       ("DELETE", "/sessions/{sid}"), ("POST", "/sessions/{sid}/ag-ui")}


@pytest.fixture(scope="module")
def api_schema(module_stack: Stack) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(module_stack.url() + "/openapi.json")


@pytest.fixture(scope="module")
def real_sid(module_stack: Stack) -> Iterator[str]:
    with httpx.Client(base_url=module_stack.url(), headers=ALICE, timeout=30) as client:
        sid = str(client.post("/sessions").json()["id"])
        workspace = module_stack.data_dir / "sessions" / sid / "workspace"
        (workspace / "brief.xml").write_text("<brief/>")
        yield sid
        assert client.get(f"/sessions/{sid}").json()["status"] == "dormant"


def check_case(case: schemathesis.Case, real_sid: str, seen: Counter[int]) -> None:
    response = case.call(headers=ALICE, timeout=30)
    seen[response.status_code] += 1
    label = f"{case.method} {case.formatted_path}"
    assert response.status_code < 500, f"{label}: {response.status_code} {response.text[:500]}"
    if response.status_code >= 400:
        assert isinstance(response.json().get("error"), str), f"{label}: {response.text[:300]}"
    if "sid" in (case.path_parameters or {}) and (case.method.upper(), case.path) not in NOT_ON_REAL_SESSION:
        case.path_parameters["sid"] = real_sid
        response = case.call(headers=ALICE, timeout=30)
        seen[response.status_code] += 1
        assert response.status_code < 500, f"{label} on a real session: {response.status_code} {response.text[:500]}"
        if response.status_code >= 400:
            assert isinstance(response.json().get("error"), str), f"{label}: {response.text[:300]}"


def test_no_server_errors(api_schema: schemathesis.BaseSchema, real_sid: str) -> None:
    # Driven by hand rather than `schemathesis.pytest.from_fixture`, whose lazy loader does not run
    # under this pytest version; one hypothesis run per operation, bounded by max_examples.
    labels = []
    seen: Counter[int] = Counter()
    for result in api_schema.get_all_operations():
        operation = result.ok()
        labels.append(operation.label)

        @given(case=operation.as_strategy())
        @settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def run(case: schemathesis.Case) -> None:
            check_case(case, real_sid, seen)

        run()
    assert "PUT /sessions/{sid}/workspace/files/{path}" in labels and "POST /sessions/{sid}/ui/sync" in labels
    # The generated requests reached the real paths, not only the 404 of unknown sessions.
    assert {200, 404, 422} <= set(seen), seen
    assert sum(seen.values()) >= 12 * len(labels), seen
