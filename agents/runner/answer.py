"""An agent's structured answer: asked for its model's way, validated, asked again.

An agent with an `output_schema` answers with a JSON value. Its model is asked for it
as the model's config says (`structured_output`): the provider's own JSON schema
output, a forced `final_answer` tool, or an instruction. A refused answer (not JSON,
or not what the schema says) is answered with what is wrong — as the tool's error
result, or as a message from the orchestrator — and the model tries again, up to
`output_retries` times; then the agent fails `output_invalid` naming the violations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.core.events import EventType
from agents.core.loop import AgentLoop, Fail, Step
from agents.core.messages import Message, OutputFormat, ToolSpec, UserMessage
from agents.core.structured import (
    ANSWER_TOOL,
    OutputMode,
    Violations,
    answer_tool_parameters,
    compact,
    feedback,
    instruction,
    parse_answer,
    strict_compatible,
    unwrap_tool_answer,
)
from agents.emitter import Emitter
from agents.errors import ToolError
from agents.spec import AgentSpec
from agents.tools.base import Tool, ToolContext

__all__ = ["Accepted", "AnswerCheck", "AnswerTool", "Refused", "answer_check", "ask_again"]


def ask_again(loop: AgentLoop, verdict: Refused, bus: Emitter, messages: list[Message]) -> Step:
    """A refused final answer: the model is told why (a USER_MESSAGE from the
    orchestrator, into `messages`) and answers again; or, its last try, it fails."""
    if verdict.failure is not None:
        return Fail("output_invalid", verdict.failure)
    bus.emit_nowait(
        EventType.USER_MESSAGE,
        {"text": verdict.feedback, "from": "orchestrator", "outputInvalid": True},
    )
    messages.append(UserMessage(text=verdict.feedback))
    return loop.refused()


def answer_check(
    spec: AgentSpec, mode: OutputMode, tools: dict[str, Tool]
) -> tuple[AnswerCheck | None, str]:
    """The structured answers of an instance of `spec` (None: it has no output schema)
    and its system prompt; in tool mode `final_answer` joins its `tools`."""
    if spec.output_schema is None:
        return None, spec.instructions
    check = AnswerCheck(spec.id, spec.output_schema, spec.output_retries, mode)
    if check.tool is not None:
        tools[ANSWER_TOOL] = check.tool
    return check, check.instructions(spec.instructions)


@dataclass(frozen=True, slots=True)
class Accepted:
    """The answer is valid: `value`, and `text`, its compact JSON."""

    value: Any
    text: str


@dataclass(frozen=True, slots=True)
class Refused:
    """The answer is not valid: tell the model `feedback` (a message from the
    orchestrator), or fail with `failure` when it had its last try."""

    feedback: str
    failure: str | None


class AnswerCheck:
    """The structured answers of one agent instance.

    Args:
        agent_id: named in the failure.
        schema: its `output_schema` (checked).
        retries: refused answers it may give again (`output_retries`).
        mode: how its model is asked (`ModelConfig.output_mode`).
    """

    __slots__ = (
        "_agent_id",
        "_schema_text",
        "_violations",
        "accepted",
        "format",
        "mode",
        "retries",
        "tool",
        "tries",
    )

    def __init__(
        self, agent_id: str, schema: dict[str, Any], retries: int, mode: OutputMode
    ) -> None:
        self._agent_id = agent_id
        self._violations = Violations(schema)
        self.retries = retries
        self.mode = mode
        self.tries = 0
        """Answers refused so far (this instance's; a takeover counts again)."""
        self.accepted: Accepted | None = None
        """The last valid `final_answer` call, until the runner takes it."""
        self.tool = AnswerTool(self, schema) if mode == "tool" else None
        self.format: OutputFormat | None = None
        """What each model request asks for (None: the instruction says it)."""
        if mode == "native":
            self.format = OutputFormat(schema=schema, strict=strict_compatible(schema))
        elif mode == "tool":
            self.format = OutputFormat(schema=schema, tool=ANSWER_TOOL)
        self._schema_text = instruction(schema) if mode == "instruction" else ""

    def instructions(self, base: str) -> str:
        """The system prompt: `base`, and the schema when the model is told it."""
        return base + self._schema_text

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The `final_answer` tool as the model is offered it (tool mode), else none."""
        if self.tool is None:
            return ()
        return (
            ToolSpec(
                name=ANSWER_TOOL,
                description=self.tool.description_for(self._agent_id),
                parameters=self.tool.parameters(),
            ),
        )

    def take_accepted(self) -> Accepted | None:
        """A `final_answer` call of the turn that just ended was valid: its answer."""
        accepted, self.accepted = self.accepted, None
        return accepted

    def judge(self, text: str) -> Accepted | Refused:
        """A final answer's text: valid, or refused (and why)."""
        value, problem = parse_answer(text)
        problems = [problem] if problem is not None else self._violations.of(value)
        if not problems:
            return Accepted(value, compact(value))
        return self.refuse(problems)

    def check_call(self, value: Any) -> Accepted | Refused:
        """A `final_answer` call's value: valid, or refused."""
        problems = self._violations.of(value)
        if not problems:
            return Accepted(value, compact(value))
        return self.refuse(problems)

    def after_turn(self, loop: AgentLoop, step: Step) -> Step:
        """The next step after a model turn (`step`, the loop's): a valid `final_answer`
        call is the answer; a refused one that was the last try fails the agent."""
        if self.tool is None:
            return step
        accepted = self.take_accepted()
        if accepted is not None:
            return loop.answered(accepted.text)
        if self.tool.failure is not None:
            return Fail("output_invalid", self.tool.failure)
        return step

    def refuse(self, problems: list[str]) -> Refused:
        """Count a refused answer: what the model is told, and (its last try) why the
        agent fails."""
        self.tries += 1
        failure = None
        if self.tries > self.retries:
            failure = (
                f"agent {self._agent_id!r}: its answer does not match its output_schema "
                f"after {self.tries} tries: " + "; ".join(problems)
            )
        tool = ANSWER_TOOL if self.tool is not None else None
        return Refused(feedback(problems, tool=tool), failure)


class AnswerTool:
    """`final_answer`: the tool an agent answers through (tool mode). A valid call is
    kept for the runner (the agent's answer); an invalid one is an error result that
    says what is wrong."""

    name = ANSWER_TOOL
    concurrency_safe = True
    stream_paths: tuple[str, ...] = ()
    idempotent = True

    def __init__(self, check: AnswerCheck, schema: dict[str, Any]) -> None:
        self._check = check
        self._parameters, self._wrapped = answer_tool_parameters(schema)
        self.failure: str | None = None
        """Set once a refused call was the agent's last try."""

    def description_for(self, agent_id: str) -> str:
        """What the model is told the tool is for."""
        del agent_id
        return (
            "Give your final answer by calling this tool once, with the answer as its "
            "arguments" + (" (in `value`)" if self._wrapped else "") + ". Call it alone, "
            "after any other tools you need; nothing you write besides it is the answer."
        )

    def parameters(self) -> dict[str, Any]:
        """The schema (wrapped in an object's `value` when it is not one)."""
        return self._parameters

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Validate the call: kept when valid, an error result when not."""
        del ctx
        verdict = self._check.check_call(unwrap_tool_answer(args, self._wrapped))
        if isinstance(verdict, Refused):
            self.failure = verdict.failure
            raise ToolError(verdict.feedback)
        self._check.accepted = verdict
        return "Accepted: this is your final answer."
