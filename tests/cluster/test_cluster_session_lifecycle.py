"""On a Redis Cluster: DELETE of a dormant and a live session leaves no key in any node (the `{sid}`
keys found by CLUSTER GETKEYSINSLOT), a proxy killed mid-delete is finished by the next, and
Idempotency-Key retries (tests/integration/test_session_delete.py and test_idempotency.py, unchanged)."""

from tests.integration.test_idempotency import (  # noqa: F401 - pytest collects the imported tests and fixtures
    test_a_retried_message_runs_once_and_answers_the_same,
)
from tests.integration.test_session_delete import (  # noqa: F401
    stack_env,
    test_a_proxy_killed_mid_delete_is_finished_by_the_next,
    test_delete_a_dormant_session,
    test_delete_a_live_session_mid_run,
)
