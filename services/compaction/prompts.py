"""Summarization prompts (Pi's compaction.ts / utils.ts, worded for a Gamma agent session).

The section headings are a contract: the scripted summarizer parses them back when it merges a
previous summary, and the runtime shows the summary to the model as-is.

Inside the `<conversation>` and `<previous-summary>` wrappers, and in the requested focus (typed by
the user on `POST /compact`), no reserved tag opens unescaped: the conversation is serialized
neutralised (serialize.py), the rest is neutralised here (docs/architecture.md "Trust boundaries").
"""

from __future__ import annotations

from shared.trust.neutralise import neutralise
from shared.trust.trusted_blocks import render

SUMMARIZATION_SYSTEM_PROMPT = """You are a context summarization assistant. Your task is to read a conversation between a user and an AI assistant, then produce a structured summary following the exact format specified.

Do NOT continue the conversation. Do NOT respond to any questions in the conversation. ONLY output the structured summary."""

SECTIONS = (
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
)

SUMMARIZATION_PROMPT = """The messages above are a conversation to summarize. Create a structured context checkpoint summary that another LLM will use to continue the work.

Use this EXACT format:

## Goal
[What is the user trying to accomplish? Can be multiple items if the session covers different tasks.]

## Constraints & Preferences
- [Any constraints, preferences, or requirements mentioned by user]
- [Or "(none)" if none were mentioned]

## Progress
### Done
- [x] [Completed tasks/changes]

### In Progress
- [ ] [Current work]

### Blocked
- [Issues preventing progress, if any]

## Key Decisions
- **[Decision]**: [Brief rationale]

## Next Steps
1. [Ordered list of what should happen next]

## Critical Context
- [Any data, examples, or references needed to continue]
- [Or "(none)" if not applicable]

Keep each section concise. Preserve exact file paths, function names, and error messages."""

UPDATE_SUMMARIZATION_PROMPT = """The messages above are NEW conversation messages to incorporate into the existing summary provided in the previous-summary block.

Update the existing structured summary with new information. RULES:
- PRESERVE all existing information from the previous summary
- ADD new progress, decisions, and context from the new messages
- UPDATE the Progress section: move items from "In Progress" to "Done" when completed
- UPDATE "Next Steps" based on what was accomplished
- PRESERVE exact file paths, function names, and error messages
- If something is no longer relevant, you may remove it

Use this EXACT format:

## Goal
[Preserve existing goals, add new ones if the task expanded]

## Constraints & Preferences
- [Preserve existing, add new ones discovered]

## Progress
### Done
- [x] [Include previously done items AND newly completed items]

### In Progress
- [ ] [Current work - update based on progress]

### Blocked
- [Current blockers - remove if resolved]

## Key Decisions
- **[Decision]**: [Brief rationale] (preserve all previous, add new)

## Next Steps
1. [Update based on current state]

## Critical Context
- [Preserve important context, add new if needed]

Keep each section concise. Preserve exact file paths, function names, and error messages."""

TURN_PREFIX_SUMMARIZATION_PROMPT = """This is the PREFIX of a turn that was too large to keep. The SUFFIX (recent work) is retained.

Summarize the prefix to provide context for the retained suffix:

## Original Request
[What did the user ask for in this turn?]

## Early Progress
- [Key decisions and work done in the prefix]

## Context for Suffix
- [Information needed to understand the retained recent work]

Be concise. Focus on what's needed to understand the kept suffix."""

SPLIT_TURN_SEPARATOR = "\n\n---\n\n**Turn Context (split turn):**\n\n"
NO_PRIOR_HISTORY = "No prior history."


def summary_prompt(conversation: str, previous_summary: str | None, custom_instructions: str | None) -> str:
    """The user message of a history summary: conversation, previous summary, then the instructions."""
    instructions = UPDATE_SUMMARIZATION_PROMPT if previous_summary else SUMMARIZATION_PROMPT
    if custom_instructions:
        instructions = f"{instructions}\n\nAdditional focus: {neutralise(custom_instructions)}"
    # The conversation quotes users, tools and files: escaped, it cannot end its block early.
    text = render("conversation", None, conversation) + "\n\n"
    if previous_summary:
        text += render("previous-summary", None, previous_summary) + "\n\n"
    return text + instructions


def turn_prefix_prompt(conversation: str) -> str:
    return render("conversation", None, conversation) + "\n\n" + TURN_PREFIX_SUMMARIZATION_PROMPT
