"""Urgency policy: may a notification start a runtime for a dormant session?

The default is no (a notification must not cost a runtime on its own): it waits for the next user wake. The types
named in `GAMMA_URGENT_NOTIFICATION_TYPES` (shared/settings/notifications.py) are urgent: for those the service publishes a
`Wake{reason: "notification"}` when the session is dormant.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.contracts.streams.notifications import ExternalNotification

UrgencyPolicy = Callable[[ExternalNotification], bool]


def never_wake(notification: ExternalNotification) -> bool:
    return False


def wake_for_types(*types: str) -> UrgencyPolicy:
    """A policy that wakes the session for the given notification types only."""
    chosen = frozenset(types)

    def policy(notification: ExternalNotification) -> bool:
        return notification.type in chosen

    return policy
