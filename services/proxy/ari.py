"""ARIs moved to `shared.ari` (the runtime validates SessionUIState tabs with the same rules); kept so
existing imports keep working."""

from shared.ari import MAX_ARI_CHARS, SCHEMES, Ari, AriError, parse_ari, same_tab, tab_key

__all__ = ["MAX_ARI_CHARS", "SCHEMES", "Ari", "AriError", "parse_ari", "same_tab", "tab_key"]
