"""A prompt's attachments as messages (docs/architecture.md "Images"): the images ride on the user
message as references (their bytes were stored by the proxy); the other files are named in a trusted
note just before it, so the agent knows to `read` them. The note is built by shared/trusted_blocks.py:
a file name is the user's text, an escaped attribute value, never a harness block."""

from __future__ import annotations

from shared.contracts.inbox import UserPrompt
from shared.contracts.messages import AgentMessage, CustomMessage, UserMessage
from shared.trusted_blocks import element, lines, render

NOTE_TYPE = "gamma.attachments"


def attachments_note(prompt: UserPrompt) -> CustomMessage | None:
    if not prompt.files:
        return None
    files = [element("file", {"path": f.path, "type": f.media_type, "bytes": f.bytes}, empty=True)
             for f in prompt.files]
    body = lines("The user attached these workspace files to the next message (read them as needed):", *files)
    return CustomMessage(custom_type=NOTE_TYPE, content=render("attachments", None, body),
                         details={"trusted": True, "injectionType": "attachments", "source": "client",
                                  "sourceId": f"{prompt.prompt_id}#attachments",
                                  "files": [f.model_dump(mode="json") for f in prompt.files]})


def prompt_messages(prompt: UserPrompt) -> tuple[list[AgentMessage], UserMessage]:
    """The note (if any) and the user message of a prompt."""
    user = UserMessage(content=prompt.message, images=prompt.images or None)
    note = attachments_note(prompt)
    return ([note] if note is not None else []), user
