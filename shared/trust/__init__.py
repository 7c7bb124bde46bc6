"""Trust boundaries: reserved tags, trusted blocks, neutralising untrusted text, confusables, OIDC tokens
(docs/architecture.md "Trust boundaries")."""
