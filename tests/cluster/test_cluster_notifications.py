"""On a Redis Cluster: notifications recorded once, a dormant one waits for the wake and precedes
the prompt, and a kill between delivery and record (tests/integration/test_notifications_acceptance.py)."""

from tests.integration.test_notifications_acceptance import (  # noqa: F401 - pytest collects the imported tests
    test_dormant_notification_waits_for_the_wake_and_precedes_the_prompt,
    test_kill_runtime_between_delivery_and_record,
    test_live_notification_posted_three_times_is_recorded_once,
)
