"""On a Redis Cluster: wake barrier and injections first, stop and wake, idle dormancy with a
compaction result applied at the wake (tests/integration/test_runtime_lifecycle.py, unchanged)."""

from tests.integration.test_runtime_lifecycle import (  # noqa: F401 - pytest collects the imported tests and fixtures
    d,
    rt,
    test_compact_command_publishes_one_request,
    test_idle_session_goes_dormant_and_compaction_result_applies_at_wake,
    test_stop_goes_dormant_and_wake_restores_the_conversation,
    test_wake_holds_prompt_until_barrier_and_puts_injections_first,
)
