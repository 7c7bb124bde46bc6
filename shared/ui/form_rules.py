"""What a client may do to the agent's question form (docs/architecture.md "Trust boundaries").

The agent opens a form (`show_file forms/<id>.json`); its answers reach the model inside a trusted
`system_update`. So a client change to SessionUIState's `activeForm`, live (runtime) or dormant
(proxy), may only answer or dismiss the form the agent opened: it cannot create one, remove one,
change its id, title, fields or any other key, set a status other than submitted or dismissed, or
touch a form already answered. Answers are checked against the agent's fields and bounded.
Refusals are `UiRefused`: 403 for authority the client does not have, 422 for bad answers.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from shared.contracts.records.ui import ActiveForm, FormField
from shared.ui.uirules import UiRefused

MAX_ANSWER_CHARS = 4000  # one text answer
MAX_ANSWERS_CHARS = 20000  # all of a form's answers together, as text
CLIENT_STATUSES = ("open", "submitted", "dismissed")


def _form(snapshot: dict[str, Any] | None) -> dict[str, Any] | None:
    raw = (snapshot or {}).get("activeForm")
    if raw is None:
        return None
    try:
        dumped = ActiveForm.model_validate(raw).model_dump(mode="json", by_alias=True)
    except ValidationError as exc:
        raise UiRefused(422, f"activeForm is not a valid form: {exc.errors()[0].get('msg')}") from exc
    assert isinstance(dumped, dict)
    return dumped


def check_client_form(before: dict[str, Any] | None, after: dict[str, Any]) -> None:
    """Raise UiRefused unless `after`'s activeForm is `before`'s, answered or dismissed by the client."""
    old, new = _form(before), _form(after)
    if old == new:
        return
    if old is None:
        raise UiRefused(403, "a client cannot create a form: only the agent opens one")
    if new is None:
        raise UiRefused(403, f"a client cannot remove the agent's form {old['id']!r}: answer or dismiss it")
    if old["status"] != "open":
        raise UiRefused(403, f"form {old['id']!r} is {old['status']} already: it cannot be changed")
    changed = sorted(k for k in set(old) | set(new) if k not in ("answers", "status") and old.get(k) != new.get(k))
    if changed:
        raise UiRefused(403, f"a client may only answer or dismiss the agent's form, not change its {', '.join(changed)}")
    if new["status"] not in CLIENT_STATUSES:
        raise UiRefused(403, f"a client cannot set a form's status to {new['status']!r}")
    fields = [FormField.model_validate(f) for f in old["fields"]]
    check_answers(fields, new["answers"], submitted=new["status"] == "submitted")


def check_answers(fields: list[FormField], answers: dict[str, Any], *, submitted: bool) -> None:
    """Answers for the agent's fields only, each of its field's kind, within the bounds."""
    by_id = {f.id: f for f in fields}
    unknown = sorted(set(answers) - set(by_id))
    if unknown:
        raise UiRefused(422, f"answers for fields the form does not have: {', '.join(unknown[:5])}")
    total = 0
    for key, value in answers.items():
        total += _check_answer(by_id[key], value)
    if total > MAX_ANSWERS_CHARS:
        raise UiRefused(422, f"the answers hold {total} characters; the limit is {MAX_ANSWERS_CHARS}")
    if submitted:
        missing = [f.id for f in fields if f.required and answers.get(f.id) in (None, "", [])]
        if missing:
            raise UiRefused(422, f"required fields are not answered: {', '.join(missing[:5])}")


def _check_answer(field: FormField, value: Any) -> int:
    """The answer's size in characters, or UiRefused(422) when it does not fit the field."""
    bad = UiRefused(422, f"the answer to {field.id!r} is not a valid {field.kind} answer")
    if value is None:
        return 0
    if field.kind == "boolean":
        if not isinstance(value, bool):
            raise bad
        return 5
    if field.kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise bad
        return len(repr(value))
    if field.kind == "multi_choice":
        if not isinstance(value, list) or len(set(map(str, value))) != len(value) \
                or not all(isinstance(v, str) and v in field.options for v in value):
            raise bad
        return sum(len(v) for v in value)
    if not isinstance(value, str) or (field.kind == "choice" and value not in field.options):
        raise bad
    if len(value) > MAX_ANSWER_CHARS:
        raise UiRefused(422, f"the answer to {field.id!r} is {len(value)} characters; the limit is {MAX_ANSWER_CHARS}")
    return len(value)
