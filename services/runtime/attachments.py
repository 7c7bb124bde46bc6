"""A prompt's attachments as messages (docs/architecture.md "Images"): the images ride on the user
message as references (their bytes were stored by the proxy); the other files are named in a trusted
note just before it, so the agent knows to `read` them. The note quotes each path as JSON and
neutralises it (shared/neutralise.py): a file name is the user's text, never a harness block."""

from __future__ import annotations

import json

from shared.contracts.inbox import UserPrompt
from shared.contracts.messages import AgentMessage, CustomMessage, UserMessage
from shared.neutralise import neutralise

NOTE_TYPE = "gamma.attachments"


def attachments_note(prompt: UserPrompt) -> CustomMessage | None:
    if not prompt.files:
        return None
    lines = ["<attachments>", "The user attached these workspace files to the next message (read them as needed):"]
    lines += [f"- {neutralise(json.dumps(f.path, ensure_ascii=False))} ({f.media_type}, {f.bytes} bytes)"
              for f in prompt.files]
    lines.append("</attachments>")
    return CustomMessage(custom_type=NOTE_TYPE, content="\n".join(lines),
                         details={"trusted": True, "injectionType": "attachments", "source": "client",
                                  "sourceId": f"{prompt.prompt_id}#attachments",
                                  "files": [f.model_dump(mode="json") for f in prompt.files]})


def prompt_messages(prompt: UserPrompt) -> tuple[list[AgentMessage], UserMessage]:
    """The note (if any) and the user message of a prompt."""
    user = UserMessage(content=prompt.message, images=prompt.images or None)
    note = attachments_note(prompt)
    return ([note] if note is not None else []), user
