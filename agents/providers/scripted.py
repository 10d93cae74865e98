"""The offline, deterministic `scripted` provider.

An agent's script (the `script:` key of its YAML) says what each model turn
streams: reasoning, text, tool calls (including `agent_spawn`), delays and
failures. Turn N answers the N-th assistant turn of the conversation, so the
same conversation always gets the same answer.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import Any

import msgspec
import trio

from agents.core.attachments import Attachment
from agents.core.messages import (
    AssistantMessage,
    Finish,
    ModelRequest,
    StreamPart,
    TextDelta,
    ThinkingDelta,
    ToolCallArgs,
    ToolCallStart,
    ToolResultMessage,
    UsageReport,
    UserMessage,
)
from agents.errors import ProviderError
from agents.providers.pacing import sleep_until
from agents.spec import ScriptSpec, ScriptStep

__all__ = ["ScriptedProvider", "render", "split_tokens"]

_TOKEN = re.compile(r"\s*\S+|\s+")
_DEFAULT_FINAL = ScriptStep(say="Done: {input}")


def split_tokens(text: str) -> list[str]:
    """Split text into word-sized deltas that join back to exactly `text`."""
    return _TOKEN.findall(text)


def render(value: Any, variables: dict[str, str]) -> Any:
    """Fill `{input}`, `{results}`, `{agent_key}`, `{attachments}`, `{attachment}` in a
    string, or in every string of a list/dict."""
    if isinstance(value, str):
        for name, replacement in variables.items():
            value = value.replace("{" + name + "}", replacement)
        return value
    if isinstance(value, list):
        return [render(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: render(v, variables) for k, v in value.items()}
    return value


_AGENT_KEY = re.compile(r"agent:[A-Za-z0-9_.-]+:[0-9a-f-]{36}")


def _variables(request: ModelRequest) -> dict[str, str]:
    last_input = ""
    results: list[str] = []
    agent_key = ""
    seen: list[Attachment] = []
    for msg in request.messages:
        if not isinstance(msg, AssistantMessage):
            seen.extend(msg.attachments)
        if isinstance(msg, UserMessage):
            last_input = msg.text
            results = []
        elif isinstance(msg, AssistantMessage):
            results = []
        elif isinstance(msg, ToolResultMessage):
            results.append(msg.content)
            found = _AGENT_KEY.search(msg.content)
            agent_key = found.group(0) if found else agent_key
    # What it was given, with the bytes it got (0: they could not be read back).
    shown = ", ".join(f"{a.name} ({a.media_type}, {len(a.data)} bytes)" for a in seen)
    return {
        "input": last_input,
        "results": "\n".join(results),
        "agent_key": agent_key,
        "attachments": shown or "none",
        "attachment": seen[-1].id if seen else "",
    }


def _count_words(request: ModelRequest) -> int:
    words = len(request.system.split())
    for msg in request.messages:
        if isinstance(msg, UserMessage):
            words += len(msg.text.split())
        elif isinstance(msg, AssistantMessage):
            words += len(msg.text.split()) + sum(len(c.arguments) // 4 for c in msg.tool_calls)
        else:
            words += len(msg.content.split())
    return words


class ScriptedProvider:
    """Replays a `ScriptSpec`; needs no network and no API key."""

    kind = "scripted"

    def __init__(self, script: ScriptSpec | None) -> None:
        self._script = script or ScriptSpec()

    @staticmethod
    def _turn_of(request: ModelRequest) -> int:
        """Which model turn `request` asks for (turns a summary stands for count)."""
        return sum(
            1 if isinstance(m, AssistantMessage) else m.summarized_turns
            for m in request.messages
            if not isinstance(m, ToolResultMessage)
        )

    def step_for(self, request: ModelRequest) -> ScriptStep:
        """The scripted turn that answers `request`."""
        turn = self._turn_of(request)
        turns = self._script.turns
        if turn < len(turns):
            return turns[turn]
        if self._script.repeat and turns:
            return turns[turn % len(turns)]
        finals = [step for step in turns if not step.calls and step.fail is None]
        return finals[-1] if finals else _DEFAULT_FINAL

    async def stream(self, request: ModelRequest) -> AsyncGenerator[list[StreamPart], None]:
        """Stream the scripted turn for `request` (or the summary a compaction asks for)."""
        window = self._script.context_window
        if window is not None and (size := _count_words(request)) > window:
            raise ProviderError(
                f"scripted: prompt is too long: {size} tokens > {window} maximum",
                provider=self.kind,
                status=400,
                error_type="invalid_request_error",
            )
        turn = self._turn_of(request)
        if request.purpose == "summary":
            step = ScriptStep(say=self._summary(request))
        else:
            step = self.step_for(request)
        variables = _variables(request)
        delay = self._script.token_delay
        every = self._script.yield_every
        if step.sleep:
            await trio.sleep(step.sleep)
        if step.fail is not None:
            raise ProviderError(
                f"scripted failure: {render(step.fail, variables)}", provider=self.kind
            )
        words: list[StreamPart] = [
            ThinkingDelta(token) for token in split_tokens(render(step.think, variables))
        ]
        words += [TextDelta(token) for token in split_tokens(render(step.say, variables))]
        emitted = len(words)
        if delay:
            # Word n is due `n * delay` after the start, on the clock — as a remote
            # model's deltas are: a consumer that falls behind finds several waiting
            # (one read, one batch), it does not slow the model down.
            start, sent = trio.current_time(), 0
            while sent < len(words):
                await sleep_until(start + (sent + 1) * delay)  # (pacing.py: cheap timers)
                due = min(int((trio.current_time() - start) / delay + 1e-9), len(words))
                yield words[sent:due]
                sent = due
        else:
            for i in range(0, len(words), every):  # one batch, then a checkpoint
                yield words[i : i + every]
                await trio.lowlevel.checkpoint()
        calls: list[StreamPart] = []
        for key, call in enumerate(step.calls):
            args = msgspec.json.encode(render(call.args, variables)).decode()
            call_id = f"call_{key}" if turn == 0 else f"call_{turn}_{key}"  # unique per instance
            calls += [ToolCallStart(key, call_id, call.name), ToolCallArgs(key, args)]
            emitted += max(1, len(args) // 4)
        if calls:
            if delay:
                await trio.sleep(delay)
            yield calls
        yield [
            Finish(step.finish or ("tool_calls" if step.calls else "stop")),
            UsageReport(_count_words(request), emitted),
        ]

    def _summary(self, request: ModelRequest) -> str:
        words = " ".join(
            " ".join(m.text.split()[:30])
            for m in request.messages[:1]
            if isinstance(m, UserMessage)
        )
        if self._script.summary is not None:
            return str(render(self._script.summary, {"input": words}))
        return f"Summary: {words}"
