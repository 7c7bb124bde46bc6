"""Notification intake: typed remote notifications, stored by id, delivered exactly once in effect."""
