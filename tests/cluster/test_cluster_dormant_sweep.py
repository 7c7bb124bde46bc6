"""On a Redis Cluster: the dormant sweep leaves only the session row and index, and the session
wakes fully after it (tests/integration/test_dormant_retention.py, unchanged)."""

from tests.integration.test_dormant_retention import (  # noqa: F401 - pytest collects the imported tests and fixtures
    r,
    stack,
    test_swept_session_keeps_only_its_row_and_index_and_wakes_fully,
)
