"""What the loop does with a reply that is not a plain answer (engine/loop.py; docs/architecture.md
"How a model reply ends"; reference §3.3):

- cut at the output limit with no tool call: the model is asked once to continue, more briefly;
- cut at the output limit while writing tool calls: the calls are not run (their arguments are
  partial), each gets a result saying so, and the model may call again with smaller arguments;
- two replies in a row cut at the output limit: a clear error ends the run;
- no text, no tool call, no refusal (a reasoning-only or empty reply): one nudge, then an error;
- stopped by the provider's content filter: the run ends and the user is told (never the model,
  as an output limit);
- a run's budget of model calls and tokens (RunBudget) spent: the run ends with a clear error.

Errors the harness decides are assistant messages with stop_reason "error" and an `error_kind`: they
are recorded and announced like a failed model call, and never replayed to the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.runtime.engine.types import RunBudget, ToolOutcome
from shared.contracts.records.messages import AgentMessage, AssistantMessage, CustomMessage, ToolCall
from shared.contracts.records.spend import BudgetReachedData
from shared.trust.trusted_blocks import render


@dataclass
class RunTally:
    """What one run has spent and been told so far."""

    calls: int = 0
    tokens: int = 0
    cut_in_a_row: int = 0  # replies cut at the output limit, one after another
    nudged: bool = False  # the run already had its nudge after an empty reply

    def count(self, message: AssistantMessage) -> None:
        self.calls += 1
        self.tokens += message.usage.input + message.usage.output


def over_budget(tally: RunTally, budget: RunBudget) -> tuple[AssistantMessage, BudgetReachedData | None] | None:
    """The error that ends the run before another model call, once its budget is spent, and the
    `budget_reached` event of the token cap (docs/costs.md "Budgets")."""
    reached: BudgetReachedData | None = None
    if budget.model_calls and tally.calls >= budget.model_calls:
        spent = f"its budget of {budget.model_calls} model calls (GAMMA_RUN_MAX_MODEL_CALLS)"
    elif budget.tokens and tally.tokens >= budget.tokens:
        spent = f"its budget of {budget.tokens} tokens (GAMMA_RUN_MAX_TOKENS; {tally.tokens} used)"
        reached = BudgetReachedData(cap="run_tokens", spent=tally.tokens, limit=budget.tokens, message=(
            f"The run stopped: it reached this run's token cap of {budget.tokens} tokens ({tally.tokens} used). "
            "Everything so far is kept; send a message to continue with a fresh run."))
    else:
        return None
    text = reached.message if reached else (
        f"The run stopped: it reached {spent}. Everything so far is kept; send a message to continue.")
    return AssistantMessage(stop_reason="error", error_kind="budget", error_message=text), reached


def judge(message: AssistantMessage, tally: RunTally) -> list[AgentMessage]:
    """The guidance the model gets after `message` (before the next call); may turn the message into
    the error that ends the run."""
    if message.stop_reason != "length":
        tally.cut_in_a_row = 0
    if message.stop_reason == "length":
        tally.cut_in_a_row += 1
        if tally.cut_in_a_row >= 2:  # a clear error, not a third truncated answer
            _fail(message, "output_limit", "The model reached its output token limit twice in a row "
                  "(finish_reason=length / response incomplete).")
            return []
        return [] if message.tool_calls() else [length_guidance()]  # cut calls: told in their results
    if message.stop_reason == "stop" and empty(message):
        if tally.nudged:
            _fail(message, "empty_reply", "The model replied twice with no text and no tool call "
                  "(an empty or reasoning-only reply); the run stopped.")
            return []
        tally.nudged = True
        return [empty_guidance()]
    return []


def empty(message: AssistantMessage) -> bool:
    return not message.text().strip() and not message.tool_calls() and not message.refusal


def _fail(message: AssistantMessage, kind: str, text: str) -> None:
    message.stop_reason = "error"
    message.error_kind = kind  # type: ignore[assignment]  # one of AssistantMessage.error_kind's values
    message.error_message = text


def length_guidance() -> CustomMessage:
    """After a reply cut at the output token limit: go on, more briefly."""
    return _guidance("max_output_tokens", "Your previous reply was cut off at the output token limit. "
                     "Continue from where it stopped, more concisely; split long content across several tool calls.")


def empty_guidance() -> CustomMessage:
    """Once per run, after a reply with no text and no tool call (reasoning only, or nothing)."""
    return _guidance("empty_reply", "Your previous reply had no text and no tool call. Continue the task: "
                     "call a tool, or answer the user.")


def cut_call_outcome(call: ToolCall) -> ToolOutcome:
    """The result of a call written when the reply hit the output limit: its arguments may be partial,
    so it did not run (reference §3.3)."""
    return ToolOutcome(is_error=True, details={"cut": "max_output_tokens"}, content=(
        f"This call to {call.name} was not run: your reply reached the output token limit while the tool "
        "calls were being written, so its arguments may be incomplete. Call it again with smaller arguments "
        "(split large content across several calls)."))


def _guidance(reason: str, text: str) -> CustomMessage:
    return CustomMessage(custom_type="gamma.system_guidance", display=False,
                         content=render("system_guidance", None, text),
                         details={"injectionType": "system_guidance", "source": "system", "reason": reason})
