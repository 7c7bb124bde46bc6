"""One router per resource under /sessions."""
