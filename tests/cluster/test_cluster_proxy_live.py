"""On a Redis Cluster: a prompt wakes a session, live writes go through the runtime, the events
stream carries the run, compaction and suspend (tests/integration/test_proxy_live.py, unchanged)."""

from tests.integration.test_proxy_live import (  # noqa: F401 - pytest collects the imported tests and fixtures
    live_sid,
    stack,
    test_compact_then_suspend,
    test_dormant_session_serves_everything_then_a_message_wakes_it,
    test_live_documents_go_through_the_runtime,
    test_live_events_stream_carries_the_run,
    test_live_file_writes_go_through_the_runtime,
    test_the_proxy_log_has_no_tracebacks,
)
