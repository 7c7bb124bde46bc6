"""Skills: the loader, a skill's files, contracts' lifecycle, completion audits, checklist progress, the skills
directory and the system prompt.

See docs/architecture.md "Skill contracts"."""
