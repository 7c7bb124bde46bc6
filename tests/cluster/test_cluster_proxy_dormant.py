"""On a Redis Cluster: writes to a dormant session (files, documents, UI), a message that wakes it,
SSE replay and resume (tests/integration/test_proxy_dormant.py, unchanged)."""

from tests.integration.test_proxy_dormant import (  # noqa: F401 - pytest collects the imported tests and fixtures
    stack,
    stack_env,
    test_create_get_and_list_sessions,
    test_dormant_documents,
    test_dormant_files,
    test_dormant_form_submission_lands_in_state_json,
    test_message_to_a_dormant_session_starts_a_wake,
    test_replay_from_zero_and_resume,
    test_writes_to_a_waking_session_are_refused_with_409,
)
