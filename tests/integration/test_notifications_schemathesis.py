"""schemathesis against the notifications service's OpenAPI document (served on its internal port):
no 5xx for any generated request, with the service token and without, for random sessions and for a
real one. Bounded by `max_examples`; the proxy's routes have tests/integration/test_proxy_schemathesis.py."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.support.stack import API_TOKEN, SERVICE_TOKEN, Stack

SERVICE = {"Authorization": f"Bearer {SERVICE_TOKEN}"}


@pytest.fixture(scope="module")
def notifications_schema(module_stack: Stack) -> schemathesis.BaseSchema:
    schema = schemathesis.openapi.from_url(module_stack.url("notifications_metrics") + "/openapi.json")
    return schema


def check(case: schemathesis.Case, base_url: str, seen: Counter[int], headers: dict[str, str]) -> None:
    response = case.call(base_url=base_url, headers=headers, timeout=30)
    seen[response.status_code] += 1
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}"
    if response.status_code >= 400:
        assert isinstance(response.json().get("error"), str), response.text[:300]


@pytest.mark.timeout(300)
def test_no_server_errors_on_any_notifications_route(notifications_schema: schemathesis.BaseSchema,
                                                      module_stack: Stack) -> None:
    with httpx.Client(base_url=module_stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}) as api:
        real_sid = str(api.post("/sessions").json()["id"])
    base_url = module_stack.url("notifications")
    seen: Counter[int] = Counter()
    labels = []
    for result in notifications_schema.get_all_operations():
        operation = result.ok()
        labels.append(operation.label)

        @given(case=operation.as_strategy())
        @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def run(case: schemathesis.Case) -> None:
            check(case, base_url, seen, SERVICE)
            check(case, base_url, seen, {"Authorization": "Bearer not-the-token"})
            if isinstance(case.body, dict) and "session_id" in case.body:  # the real session's paths
                case.body["session_id"] = real_sid
                check(case, base_url, seen, SERVICE)

        run()
    assert "POST /notifications" in labels and "PUT /connectors/{name}" in labels
    assert {401, 404} <= set(seen) and (seen[202] + seen[422]) > 0, seen
