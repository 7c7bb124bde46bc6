"""Scripted workflow policies: the offline model doing a workflow skill's steps for real (files written,
`gml` run through the sandboxed bash, decks created), so the completion audit and `make eval` judge
real transcripts. Used by scripted/gamma.py for a new-deck request (every step) and for
an `eval-policy:` prompt (evals/*.yaml, bench/eval.py):

    eval-policy: {"policy": "deck-generation", "skip": ["validate"], "onAudit": "repair"}
    <the scenario's prompt>

Each policy is a list of labelled batches (a label is a checklist step id, or `load` / `complete`);
a step may take several batches, in order: the inspect steps render the cards to PNG, then `read`
one (the tools of one batch run in parallel, so the read waits for the next batch), as the skills'
inspect steps say. `skip` leaves a step's batches out. When the completion audit refuses the final
message (its error starts with "Completion audit:"), `onAudit` decides: `repair` does the named
steps, then completes again; `explain` completes declaring each in message_user's `deviations` ({step, cause}; the audit reads
that list) and a Deviations section for the user; `ignore` sends the same message again.
Stateless: the position comes from the messages since the prompt, as for `script:` prompts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scripted.types import ScriptedReply, ScriptedToolCall
from services.runtime.skillset.skills import Skill

POLICY_PREFIX = "eval-policy:"
AUDIT_MARK = "Completion audit:"
MISSING_RE = re.compile(r"^- ([a-z0-9-]+): ", re.MULTILINE)
GML = 'python3 "$GAMMA_SKILLS_DIR/gml-cli/scripts/gml.py"'
Calls = list[ScriptedToolCall]
Batch = tuple[str, Calls]


def call(tool: str, **arguments: Any) -> ScriptedToolCall:
    return ScriptedToolCall(name=tool, arguments=arguments)


def todo(*items: tuple[str, str, str]) -> ScriptedToolCall:
    """A blocked task says what it waits for (the todo tool's rule)."""
    return call("todo", items=[{"id": i, "content": c, "status": s, **({"reason": "waiting for the user's answer"}
                                                                        if s == "blocked" else {})}
                               for i, c, s in items])


def gml_deck(topic: str) -> dict[str, Any]:
    """A small deck that passes `gml validate` and `gml lint --strict`."""
    cards: list[dict[str, Any]] = [{"id": "card_1", "layout": "title", "title": topic.title()[:80],
                                    "blocks": [{"type": "text", "text": f"An overview of {topic}"}]}]
    cards += [{"id": f"card_{n}", "layout": "content", "title": f"Key point {n - 1}",
               "blocks": [{"type": "bullets", "items": [f"What matters about {topic}", "Why it matters now"]}]}
              for n in range(2, 5)]
    cards.append({"id": "card_5", "layout": "closing", "title": "Summary",
                  "blocks": [{"type": "text", "text": f"What to remember about {topic}."}]})
    return {"title": topic.title()[:80], "theme": "default", "metadata": {"brief": "file:brief.xml"}, "cards": cards}


def skills_batch(names: list[str], skills: Mapping[str, Skill]) -> Batch:
    wanted: list[str] = []
    for n in names:
        wanted += [n, *(skills[n].manifest.requires_skills if n in skills else [])]
    return "load", [call("skill", name=n) for n in dict.fromkeys(wanted)]


def deck_generation(topic: str, skills: Mapping[str, Skill]) -> list[Batch]:
    deck = gml_deck(topic)
    brief = (f"<brief version=\"1\">\n  <title>{topic.title()}</title>\n  <topic>{topic}</topic>\n"
             f"  <purpose>Explain {topic}.</purpose>\n"
             "  <audience>General</audience>\n  <language>en</language>\n"
             "  <structure><section>Title, three key points, summary</section></structure>\n</brief>\n")
    plan = (("brief", "Write the brief", "complete"), ("deck", "Build the deck", "in_progress"),
            ("review", "Inspect, repair and review", "pending"))
    return [
        skills_batch(["deck-generation"], skills),
        ("brief", [call("write", path="brief.xml", content=brief)]),
        ("brief-check", [call("bash", command='python3 -c "import xml.dom.minidom,sys; '
                              'xml.dom.minidom.parse(sys.argv[1])" brief.xml && echo well-formed')]),
        ("plan", [todo(*plan)]),
        ("deck-file", [call("write", path="deck.json", content=json.dumps(deck, indent=1))]),
        ("validate", [call("bash", command=f"{GML} validate deck.json")]),
        ("create", [call("show_gamma", doc="deck", title=topic.title()[:80], deck=deck),
                    call("message_user", message="The brief and a first deck are ready; I am reviewing it now.",
                         blockOnUser=False)]),
        ("inspect", [call("bash", command=f"{GML} outline deck.json && {GML} render deck.json && "
                                              f"{GML} render deck.json --png png")]),
        ("inspect", [call("read", path="png/card_1.png")]),
        ("lint", [call("bash", command=f"{GML} lint --strict deck.json")]),
        ("todo-complete", [todo(*((i, c, "complete") for i, c, _ in plan))]),
        ("complete", [call("message_user", message=f"Your deck about {topic} is ready: 5 cards, opened in a tab. "
                           "Deviations: none.", blockOnUser=True, deviations=[])]),
    ]


def gml_editing(topic: str, skills: Mapping[str, Skill]) -> list[Batch]:
    """Edits card_2's title of the deck `deck` (a scenario creates it first)."""
    before = gml_deck(topic)
    after = json.loads(json.dumps(before))
    after["cards"][1]["title"] = "The one point that matters"
    plan = (("edit", "Edit card_2", "complete"), ("verify", "Verify and report", "in_progress"))
    return [
        skills_batch(["gml-editing"], skills),
        ("read-deck", [call("show_gamma", doc="deck"),
                       call("write", path="edits/deck/before.json", content=json.dumps(before, indent=1))]),
        ("plan", [todo(*plan)]),
        ("edit-copy", [call("write", path="edits/deck/after.json", content=json.dumps(after, indent=1))]),
        ("validate", [call("bash", command=f"{GML} validate edits/deck/after.json")]),
        ("diff", [call("bash", command=f"{GML} diff edits/deck/before.json edits/deck/after.json")]),
        ("apply", [call("show_gamma", doc="deck", deck=after)]),
        ("inspect", [call("bash", command=f"{GML} render --card card_2 edits/deck/after.json && "
                                              f"{GML} render edits/deck/after.json --png edits/deck/png --card card_2")]),
        ("inspect", [call("read", path="edits/deck/png/card_2.png")]),
        ("todo-complete", [todo(*((i, c, "complete") for i, c, _ in plan))]),
        ("complete", [call("message_user", message="Card 2 now reads 'The one point that matters'. Deviations: none.",
                           blockOnUser=True, deviations=[])]),
    ]


def import_deck(topic: str, skills: Mapping[str, Skill]) -> list[Batch]:
    draft = gml_deck(topic)
    draft["cards"][1]["notes"] = "page 2"
    tasks = (("wait", "Wait for import", "complete"), ("normalize", "Normalize deck", "in_progress"),
             ("review", "Review and report", "pending"))
    return [
        skills_batch(["import"], skills),
        ("identify", [call("bash", command="ls uploads/ && file uploads/source.pdf || true")]),
        ("plan", [todo(*tasks)]),
        ("draft", [call("write", path="imports/imp1/draft.json", content=json.dumps(draft, indent=1))]),
        ("normalize", [call("write", path="imports/imp1/deck.json", content=json.dumps(draft, indent=1))]),
        ("validate", [call("bash", command=f"{GML} validate imports/imp1/deck.json")]),
        ("apply", [call("show_gamma", doc="imported", deck=draft)]),
        ("inspect", [call("bash", command=f"{GML} render imports/imp1/deck.json && {GML} lint imports/imp1/deck.json")]),
        ("todo-complete", [todo(*((i, c, "complete") for i, c, _ in tasks))]),
        ("complete", [call("message_user", message="Imported: 5 cards, open in a tab. Deviations: none.",
                           blockOnUser=True, deviations=[])]),
    ]


def ask_first(topic: str, skills: Mapping[str, Skill]) -> list[Batch]:
    """deck-generation with ask-user-questions: a blocking question, not a completion (todo blocked)."""
    form = {"id": "form_audience", "title": "One question before I build your deck", "status": "open",
            "fields": [{"id": "audience", "label": "Who will see this deck?", "kind": "choice",
                        "options": ["Board", "Customers"], "required": True}]}
    return [
        skills_batch(["deck-generation", "ask-user-questions"], skills),
        ("plan", [todo(("audience", "Ask who the audience is", "blocked"), ("brief", "Write the brief", "blocked"))]),
        ("form", [call("write", path="forms/form_audience.json", content=json.dumps(form))]),
        ("show-form", [call("show_file", path="forms/form_audience.json")]),
        ("complete", [call("message_user", message="Who will see this deck? The form is open.", blockOnUser=True)]),
    ]


def reference(name: str) -> Callable[[str, Mapping[str, Skill]], list[Batch]]:
    def policy(topic: str, skills: Mapping[str, Skill]) -> list[Batch]:
        return [skills_batch([name], skills),
                ("complete", [call("message_user", message=f"From {name}: the answer about {topic}.",
                                   blockOnUser=True)])]
    return policy


POLICIES: dict[str, Callable[[str, Mapping[str, Skill]], list[Batch]]] = {
    "deck-generation": deck_generation, "gml-editing": gml_editing, "import": import_deck,
    "ask-user-questions": ask_first, "gml-authoring": reference("gml-authoring"), "gml-cli": reference("gml-cli"),
}


@dataclass
class Policy:
    policy: str
    skip: list[str] = field(default_factory=list)
    on_audit: str = "repair"
    topic: str = "the topic"

    @classmethod
    def parse(cls, prompt: str) -> Policy | None:
        if not prompt.startswith(POLICY_PREFIX):
            return None
        head, _, rest = prompt[len(POLICY_PREFIX):].partition("\n")
        spec = json.loads(head)
        return cls(policy=spec["policy"], skip=list(spec.get("skip", [])), on_audit=spec.get("onAudit", "repair"),
                   topic=str(spec.get("topic") or rest.strip()[:60] or "the topic"))


def _refusal(messages: list[dict[str, Any]], prompt_at: int) -> tuple[int, list[str]] | None:
    """(assistant turns before the refused message, the step ids the audit named) or None."""
    turns = 0
    for m in messages[prompt_at + 1:]:
        if m.get("role") == "assistant":
            turns += 1
        elif m.get("role") == "tool" and str(m.get("content", "")).startswith(AUDIT_MARK):
            return turns, MISSING_RE.findall(str(m["content"]))
    return None


def reply_for(policy: Policy, skills: Mapping[str, Skill], messages: list[dict[str, Any]], prompt_at: int,
              step: int) -> ScriptedReply | None:
    full = POLICIES[policy.policy](policy.topic, skills)
    batches = [b for b in full if b[0] not in policy.skip]
    refused = _refusal(messages, prompt_at)
    if refused is None:
        return ScriptedReply(tool_calls=batches[step][1]) if step < len(batches) else None
    at, named = refused
    final = next(calls for label, calls in full if label == "complete")
    if policy.on_audit == "repair":
        reaction = [calls for label, calls in full if label in named] + [final]
    elif policy.on_audit == "explain":
        cause = "skipped on purpose in this evaluation run"
        lines = "\n".join(f"- {n}: {cause}" for n in named)
        reaction = [[call("message_user", message=f"Done, with deviations.\nDeviations:\n{lines}", blockOnUser=True,
                          deviations=[{"step": n, "cause": cause} for n in named])]]
    else:
        reaction = [final]
    r = step - at
    return ScriptedReply(tool_calls=[ScriptedToolCall(name=c.name, arguments=c.arguments) for c in reaction[r]]) \
        if r < len(reaction) else None
