"""Scoped workspace knowledge (seed: "Follow-up: Scoped knowledge"): the note, its Redis store, the
lexical ranker that picks candidate notes for a prompt, and the `<knowledge_hints>` block.

Notes belong to an owner, not to a session: `gamma:knowledge:{owner}` is a hash note id -> note JSON,
`gamma:knowledge:{owner}:rev` a hash note id -> last revision (kept after a delete, so a re-created
note never reuses a revision and `knowledge:{id}@{rev}` stays a unique injection source id). The proxy
is the only writer; the runtime reads them at prompt time and in `read_workspace_rule`.

Selection rule (docs/architecture.md "Scoped knowledge"): Okapi BM25 (k1 1.2, b 0.75, the
non-negative Lucene idf) of the prompt against each note's name + scope, over the owner's notes as the
corpus; the notes scoring at least `min_score` (0.1: one shared term that is not in nearly every
note), best first, at most `top_k`. The harness only proposes: the model makes the final scope match.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.trust.trusted_blocks import AttrValue, element, fragment, lines, render

KnowledgeSource = Literal["workspace", "system"]
NOTE_ID = r"^[a-z0-9][a-z0-9._-]{0,63}$"
MAX_NAME = 120
MAX_SCOPE = 500
MAX_BODY = 256 * 1024
MAX_NOTES = 200  # per owner: the ranker scores every note at each prompt
SOURCE_ID_PREFIX = "knowledge:"
BLOCKING = "BLOCKING: Fetch each matching unread note before the first task action."
K1, B = 1.2, 0.75
TOP_K = 5
MIN_SCORE = 0.1


class KnowledgeBody(BaseModel):
    """`PUT /knowledge/{id}`: what a client writes."""
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=MAX_NAME)
    scope: str = Field(min_length=1, max_length=MAX_SCOPE, description="One sentence: when the note applies.")
    # A client writes user-authored notes only: `system` (system-authored, a higher place in the
    # knowledge precedence) is the harness's to claim, never a client's (a 422 at the edge).
    source: Literal["workspace"] = Field("workspace", description="Always `workspace`: notes a user writes.")
    body: str = Field(min_length=1, max_length=MAX_BODY)


class KnowledgeNote(KnowledgeBody):
    source: KnowledgeSource = "workspace"  # type: ignore[assignment]  # stored notes may be system-authored
    id: str = Field(pattern=NOTE_ID)
    revision: int = Field(ge=1)
    updated_at: int


class KnowledgePointer(BaseModel):
    """A note without its body (`GET /knowledge` items, the hints)."""
    id: str
    name: str
    scope: str
    source: KnowledgeSource
    revision: int
    updated_at: int


class KnowledgeList(BaseModel):
    notes: list[KnowledgePointer]


def pointer(note: KnowledgeNote) -> KnowledgePointer:
    return KnowledgePointer(**note.model_dump(exclude={"body"}))


# ---------------------------------------------------------------- keys and store


def notes_key(owner: str) -> str:
    return "gamma:knowledge:{" + owner + "}"


def revisions_key(owner: str) -> str:
    return notes_key(owner) + ":rev"


def source_id(note_id: str, revision: int) -> str:
    return f"{SOURCE_ID_PREFIX}{note_id}@{revision}"


def parse_source_id(value: str) -> tuple[str, int] | None:
    if not value.startswith(SOURCE_ID_PREFIX) or "@" not in value:
        return None
    note_id, _, rev = value[len(SOURCE_ID_PREFIX):].rpartition("@")
    return (note_id, int(rev)) if rev.isdigit() else None


# Revision and note in one step: two concurrent PUTs of one note get distinct revisions, and the
# stored note always carries the revision it was written with.
PUT_SCRIPT = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return -1
end
local rev = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
local doc = cjson.decode(ARGV[2])
doc['revision'] = rev
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(doc))
return rev
"""
DELETE_SCRIPT = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
return redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
"""


class TooManyNotes(Exception):
    pass


async def put_note(redis: Any, owner: str, note_id: str, body: KnowledgeBody, now: int) -> KnowledgeNote:
    doc = {**body.model_dump(), "id": note_id, "updated_at": now, "revision": 0}
    rev = int(await redis.eval(PUT_SCRIPT, 2, notes_key(owner), revisions_key(owner), note_id,
                               json.dumps(doc), MAX_NOTES))
    if rev < 0:
        raise TooManyNotes(f"at most {MAX_NOTES} knowledge notes per owner")
    return KnowledgeNote(**{**doc, "revision": rev})


async def delete_note(redis: Any, owner: str, note_id: str) -> int:
    """The deletion's revision, or 0 when there was no such note."""
    return int(await redis.eval(DELETE_SCRIPT, 2, notes_key(owner), revisions_key(owner), note_id))


def _parse(raw: Any) -> KnowledgeNote | None:
    try:
        return KnowledgeNote.model_validate_json(raw)
    except ValueError:
        return None  # a note another version wrote: skipped, never fatal for a prompt


async def get_note(redis: Any, owner: str, note_id: str) -> KnowledgeNote | None:
    raw = await redis.hget(notes_key(owner), note_id)
    return _parse(raw) if raw is not None else None


def notes_of(raw: dict[Any, Any]) -> list[KnowledgeNote]:
    """The notes of a `notes_key` hash, by id."""
    notes = [n for n in (_parse(v) for v in raw.values()) if n is not None]
    return sorted(notes, key=lambda n: n.id)


async def all_notes(redis: Any, owner: str) -> list[KnowledgeNote]:
    return notes_of(await redis.hgetall(notes_key(owner)))


# ---------------------------------------------------------------- the ranker

STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in", "into", "is", "it", "its",
    "of", "on", "or", "that", "the", "this", "to", "use", "used", "when", "where", "which", "with", "you", "your",
    "i", "we", "our", "me", "my", "please", "can", "could", "would", "should", "will", "do", "does"))
TOKEN_RE = re.compile(r"[a-z0-9]+")


def stem(word: str) -> str:
    """A light suffix stripper, applied alike to notes and prompts (images/image, colours/colour)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    return [stem(t) for t in TOKEN_RE.findall(text.lower()) if len(t) > 1 and t not in STOPWORDS]


def bm25_scores(query: str, documents: Sequence[str]) -> list[float]:
    """Okapi BM25 of `query` against each document (the documents are the corpus)."""
    docs = [Counter(tokens(d)) for d in documents]
    n = len(docs)
    if n == 0:
        return []
    avgdl = sum(sum(d.values()) for d in docs) / n or 1.0
    df: Counter[str] = Counter()
    for d in docs:
        df.update(d.keys())
    scores = []
    for d in docs:
        length = sum(d.values())
        score = 0.0
        for term in set(tokens(query)):
            tf = d.get(term, 0)
            if tf:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avgdl))
        scores.append(score)
    return scores


def select_notes(prompt: str, notes: Sequence[KnowledgeNote], top_k: int = TOP_K,
                 min_score: float = MIN_SCORE) -> list[tuple[KnowledgeNote, float]]:
    """Candidate notes for a prompt: score >= min_score, best first (ties by id), at most top_k."""
    scores = bm25_scores(prompt, [f"{n.name}\n{n.scope}" for n in notes])
    ranked = sorted(zip(notes, scores, strict=True), key=lambda p: (-p[1], p[0].id))
    return [(n, round(s, 4)) for n, s in ranked if s >= min_score][:top_k]


# ---------------------------------------------------------------- the injected blocks


def hints_block(notes: Iterable[KnowledgePointer | KnowledgeNote]) -> str:
    """The seed's `<knowledge_hints>` format: the BLOCKING line, then one pointer per note, no bodies.
    Name and scope are the note author's text: attribute values, escaped by the builder."""
    pointers = [fragment(["  ", element("knowledge", {"id": n.id, "name": n.name, "scope": n.scope,
                                                      "source": n.source}, empty=True, attr_indent="  ")])
                for n in notes]
    return render("knowledge_hints", None, lines(f"  {BLOCKING}", *pointers))


def update_text(note_id: str, revision: int, note: KnowledgeNote | None) -> str:
    """The `<workspace_update>` for a note written or deleted while a session may hold a copy."""
    attrs: dict[str, AttrValue] = {"knowledge_id": note_id, "revision": revision}
    if note is None:
        return render("workspace_update", attrs, f"This workspace knowledge note was deleted (revision {revision}). "
                      "Stop applying it; a copy you loaded earlier no longer counts.")
    attrs |= {"name": note.name, "scope": note.scope, "source": note.source}
    return render("workspace_update", attrs, f"This workspace knowledge note changed: now revision {revision}. A "
                  "copy you loaded earlier is out of date: if the note matches your task, read it again with read_workspace_rule before you "
                  "rely on it.")
