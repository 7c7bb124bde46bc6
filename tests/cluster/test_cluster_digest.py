"""On a Redis Cluster: user edits become scoped digests, a dormant brief edit is one trusted update
before the woken prompt (tests/integration/test_digest_acceptance.py, unchanged)."""

from tests.integration.test_digest_acceptance import (  # noqa: F401 - pytest collects the imported tests and fixtures
    session,
    stack_env,
    test_brief_saved_while_dormant_is_one_trusted_update_before_the_woken_prompt,
    test_five_rapid_edits_to_one_card_become_one_card_scoped_digest,
    test_two_cards_are_named_and_the_rest_unchanged,
)
