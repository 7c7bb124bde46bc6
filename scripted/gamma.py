"""The scripted model: the offline default, served behind the real openai client (transport.py).

Scenarios, chosen from the latest user message:
- `script: [steps...]`: exact tool-call sequences for tests. Step i answers the i-th model call
  after that message: `{"content"?, "tool_calls"?: [{"name", "arguments"}], "error"?: {status, code,
  message}}`. An error step is skipped once the request carries a compaction summary (so a
  "context overflow, compact, retry once" script terminates). After the last step: the default reply.
- a request to create a presentation: every step of deck-generation's checklist for real (the skill
  and its required reference skills in the first batch, brief.xml, todo plan, deck.json validated,
  rendered (to PNG too, and a card `read`) and linted with `gml`, show_gamma, a progress
  message_user(false), the todo complete),
  then message_user(true) (workflows.py);
- a request to import or convert a PPTX/PDF/DOCX/Keynote file: the import workflow's steps; a request
  to change, edit, rename or retitle a card: gml-editing's steps on the deck `deck` (both complete
  with message_user's `deviations` empty, workflows.py);
- a prompt naming "the connector NAME" (with dynamic tools): load it, call its tool, report the
  answer (`connector_reply` below);
- `eval-policy: {...}` prompts: a workflow policy of workflows.py that can skip steps (evals);
- anything else: one message_user(true) that names each injection it received (kind and ref).
Injections that reach the model after its prompt was already answered (a blocking message_user; an
idle turn started for an active task) are acknowledged in plain text, which ends the run: the prompt
is not answered a second time.
A step may also carry the failure-script fields of scripted/strict/failures.py (`reasoning`/`summary`,
`refusal`, `finish_reason`, `cut`, `stream_error`, `no_terminal`, `empty`, `usage`, `stall_s`,
`reject_replayed`, `raw_arguments` on a tool call; an error step's `times`, `retry_after`, `headers`;
an `empty` step's `times`): scripted/README.md "Scenarios" lists them.
Requests without the message_user tool (a subagent) get a plain text answer, or, for a `script:`
task, its steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from scripted.strict import failures
from scripted.types import ScriptedReply, ScriptedToolCall
from scripted.workflows import AUDIT_MARK, Policy, reply_for
from services.runtime.model.convert import SUMMARY_PREFIX, TOOL_IMAGES_PREFIX, enveloped_user_text
from services.runtime.skillset.skills import Skill
from shared.contracts.records.injection import INJECTION_KINDS

TAGS = (*INJECTION_KINDS, "todo_state", "active_skill", "knowledge_hints", "active_knowledge", "checklist_progress",
        "run_aborted", "session_rewound")
TAG_RE = re.compile(r"^\s*<(" + "|".join(TAGS) + r")\b([^>]*)>", re.DOTALL)
# Injections come as developer messages, or as user messages where the session sends them user-role
# (model/convert.py); user text never opens with a reserved tag (shared/trust/neutralise.py).
HARNESS_ROLES = ("developer", "user")
REF_RE = re.compile(r'ref="([^"]*)"')
IMPORT_RE = re.compile(r"\b(import|convert)\b.*\b(pptx|pdf|docx|keynote)\b", re.IGNORECASE | re.DOTALL)
EDIT_RE = re.compile(r"\b(change|edit|rename|retitle)\b.*\bcards?\b", re.IGNORECASE | re.DOTALL)
DECK_RE = re.compile(r"\b(create|make|build|generate|draft|write)\b.*\b(presentation|deck|slides?)\b",
                     re.IGNORECASE | re.DOTALL)


def injection_of(text: str) -> tuple[str, str | None] | None:
    m = TAG_RE.match(text)
    if m is None:
        return None
    ref = REF_RE.search(m.group(2))
    return m.group(1), ref.group(1) if ref else None


def _text_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as text: a user message with image parts reads as its text, and the user-role
    message that carries a tool's images (model/convert.py) is not a prompt, so it is left out."""
    out = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "user" and isinstance(content, list):
            text = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
            if text.startswith(TOOL_IMAGES_PREFIX):
                continue
            m = {**m, "content": text}
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            typed = enveloped_user_text(m["content"])  # the user-role fallback's quotation around user text
            if typed is not None:
                m = {**m, "content": typed}
        out.append(m)
    return out


def _is_prompt(msg: dict[str, Any]) -> bool:
    content = msg.get("content")
    return (msg.get("role") == "user" and isinstance(content, str) and injection_of(content) is None
            and not content.startswith(SUMMARY_PREFIX))


class ScriptedGamma:
    def __init__(self, skills: Mapping[str, Skill] | None = None) -> None:
        self.skills = dict(skills or {})
        self._raised: dict[tuple[str, int], int] = {}  # (prompt, step) -> failures served (`times`)

    def __call__(self, body: dict[str, Any]) -> ScriptedReply:
        messages = _text_only(body.get("messages", []))
        tools = {t["function"]["name"] for t in body.get("tools", []) if "function" in t}
        prompt_at = max((i for i, m in enumerate(messages) if _is_prompt(m)), default=-1)
        if prompt_at < 0:
            prompt_at = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
        prompt = str(messages[prompt_at].get("content", "")) if messages else ""
        step = sum(1 for m in messages[prompt_at + 1 :] if m.get("role") == "assistant")
        usage = max(len(json.dumps(messages)) // 4, 1)
        if "message_user" not in tools:  # a subagent: a scripted task (tests) or its findings
            scripted = self._script(prompt, step, messages, body) if prompt.startswith("script:") else None
            return scripted or ScriptedReply(content=f"Findings for: {prompt[:200]}", prompt_tokens=usage,
                                             completion_tokens=20)
        reply: ScriptedReply | None = None
        if prompt.startswith("script:"):
            reply = self._script(prompt, step, messages, body)
        elif (policy := Policy.parse(prompt)) is not None:
            reply = reply_for(policy, self.skills, messages, prompt_at, step)
        elif (connector := connector_reply(prompt, tools, messages, step)) is not None:
            reply = connector
        elif IMPORT_RE.search(prompt):
            reply = reply_for(Policy("import", topic="the imported file"), self.skills, messages, prompt_at, step)
        elif EDIT_RE.search(prompt):
            reply = reply_for(Policy("gml-editing", topic="the deck"), self.skills, messages, prompt_at, step)
        elif DECK_RE.search(prompt):
            reply = self._deck(prompt, messages, prompt_at, step)
        if reply is None:
            reply = self._default(prompt, messages)
        reply.prompt_tokens = usage
        reply.completion_tokens = 10 + len(reply.content) // 4
        return reply

    # ------------------------------------------------------------ scenarios

    def _script(self, prompt: str, step: int, messages: list[dict[str, Any]],
                body: dict[str, Any] | None = None) -> ScriptedReply | None:
        # Text after the script (a note the harness added to the user's message, e.g. an image's stand-in) is not part of it.
        steps = list(enumerate(json.JSONDecoder().raw_decode(prompt, len("script:"))[0]))
        summarized = any(str(m.get("content", "")).startswith(SUMMARY_PREFIX) for m in messages)
        steps = [(i, s) for i, s in steps if not ("error" in s and (summarized or self._spent(prompt, i, s)))
                 and not (_served_once(s) and self._spent(prompt, i, s))]
        if step >= len(steps):
            return None
        index, s = steps[step]
        if "error" in s:
            self._count(prompt, index)
            raise failures.error_of(s, str((body or {}).get("model", "")))
        if _served_once(s):
            self._count(prompt, index)
        if "reject_replayed" in s and not self._spent(prompt, index, s):
            rejected = failures.rejection(s, body or {})
            if rejected is not None:
                self._count(prompt, index)
                raise rejected
        return failures.reply_of(
            s, cut=bool(s.get("cut")) and not self._spent(prompt, index, {"times": 1}, count=True),
            stream_error="stream_error" in s and not self._spent(prompt, index, s, count=True))

    def _count(self, prompt: str, index: int) -> None:
        key = (prompt, index)
        self._raised[key] = self._raised.get(key, 0) + 1

    def _spent(self, prompt: str, index: int, step: dict[str, Any], count: bool = False) -> bool:
        """An error (or cut) step with `times: n` fails n times, then is skipped; without `times`
        it fails every time."""
        key = (prompt, index)
        done = self._raised.get(key, 0)
        if count:
            self._raised[key] = done + 1
        return "times" in step and done >= int(step["times"])

    def _deck(self, prompt: str, messages: list[dict[str, Any]], prompt_at: int, step: int) -> ScriptedReply | None:
        topic = DECK_RE.sub("", prompt).strip(" .?!:") or "the requested topic"
        topic = re.sub(r"^(a|an|the|about|on)\s+", "", topic, flags=re.IGNORECASE)[:80] or "the topic"
        return reply_for(Policy("deck-generation", topic=topic), self.skills, messages, prompt_at, step)

    def _default(self, prompt: str, messages: list[dict[str, Any]]) -> ScriptedReply:
        last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        seen: list[str] = []
        for m in messages[last_assistant + 1 :]:
            found = injection_of(str(m.get("content", ""))) if m.get("role") in HARNESS_ROLES else None
            if found is not None and found[0] in INJECTION_KINDS:
                seen.append(f"{found[0]} (ref={found[1]})" if found[1] else found[0])
        if _answered(messages):
            return ScriptedReply(content="Noted: " + ("; ".join(seen) if seen else "nothing new") + ".")
        said = prompt.strip().replace("\n", " ")[:200]
        text = f"You said: {said!r}."
        text += " Injections received: " + "; ".join(seen) + "." if seen else " No injections received."
        return ScriptedReply(tool_calls=[ScriptedToolCall(name="message_user",
                                                          arguments={"message": text, "blockOnUser": True})])


def _answered(messages: list[dict[str, Any]]) -> bool:
    """The latest prompt already has its blocking answer (a message_user with blockOnUser that the
    completion audit did not refuse)."""
    refused = {m.get("tool_call_id") for m in messages
               if m.get("role") == "tool" and str(m.get("content", "")).startswith(AUDIT_MARK)}
    for m in reversed(messages):
        if _is_prompt(m):
            return False
        calls = (m.get("tool_calls") or []) if m.get("role") == "assistant" else []
        for call in calls:
            fn = call.get("function") or {}
            if fn.get("name") == "message_user" and call.get("id") not in refused:
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    continue
                if args.get("blockOnUser"):
                    return True
    return False


def _served_once(step: dict[str, Any]) -> bool:
    """An `empty` step with `times: n` is served n times, then skipped: an empty reply is not replayed
    (nothing in it the model could continue from), so the step count cannot move past it."""
    return bool(step.get("empty")) and "times" in step


# The connector scenario (docs/architecture.md "Connectors"): a prompt that asks "the connector NAME"
# (optionally "for TOOL") loads its namespace, calls the tool with no arguments, and reports its answer, so
# an offline session (`make run`, GAMMA_DYNAMIC_TOOLS=1) exercises a connector end to end. Steps follow the
# model calls after the prompt.
CONNECTOR_RE = re.compile(r"\bconnector\s+([a-z][a-z0-9_-]{0,40})(?:\s+for\s+([a-z][a-z0-9_]{0,20}))?")


def _say(text: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[ScriptedToolCall(name="message_user",
                                                      arguments={"message": text, "blockOnUser": True})])


def connector_reply(prompt: str, tools: set[str], messages: list[dict[str, Any]], step: int) -> ScriptedReply | None:
    m = CONNECTOR_RE.search(prompt)
    if m is None or "load_tools" not in tools:
        return None
    name, wanted = m.group(1), m.group(2)
    if step == 0:
        return ScriptedReply(tool_calls=[ScriptedToolCall(name="load_tools",
                                                          arguments={"namespace": f"connector:{name}"})])
    if step == 1:
        offered = sorted(t for t in tools if t.startswith(f"{name}__"))
        tool = f"{name}__{wanted}" if wanted else (offered[0] if offered else None)
        if tool is None or tool not in tools:
            return _say(f"The connector {name} is not available here.")
        return ScriptedReply(tool_calls=[ScriptedToolCall(name=tool, arguments={})])
    if step == 2:
        answer = next((str(x.get("content", "")) for x in reversed(messages) if x.get("role") == "tool"), "")
        return _say(f"The connector {name} answered: {answer[:500]}")
    return None
