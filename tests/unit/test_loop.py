"""The agent loop's decisions, read without running anything (`agents/core/loop.py`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agents.core.compaction import CONTINUE_PROMPT
from agents.core.loop import (
    AgentLoop,
    AskModel,
    Compact,
    ContinueCut,
    Fail,
    Finish,
    NextTurn,
    WaitQuiet,
)


def test_a_turn_with_tool_calls_leads_to_another_turn() -> None:
    loop = AgentLoop("a", max_turns=3)
    assert loop.start() == NextTurn()
    assert loop.ready() == AskModel()
    assert loop.turn_ended("", called_tools=True, finish_reason="tool_calls") == NextTurn()
    assert loop.ready() == AskModel()
    assert loop.turn_ended("done", called_tools=False, finish_reason="stop") == WaitQuiet()
    assert loop.quiet(inbox=False) == Finish("done")


def test_max_turns_fails_before_asking_again() -> None:
    loop = AgentLoop("a", max_turns=2)
    for _ in range(2):
        assert loop.ready() == AskModel()
        loop.turn_ended("", called_tools=True, finish_reason="tool_calls")
    step = loop.ready()
    assert isinstance(step, Fail)
    assert step.error_type == "max_turns"
    assert "reached max_turns (2)" in step.message


def test_an_answer_cut_by_the_output_limit_is_continued_then_joined() -> None:
    loop = AgentLoop("a", max_turns=5, continue_limit=2)
    loop.ready()
    assert loop.turn_ended("Hel", called_tools=False, finish_reason="length") == ContinueCut(
        CONTINUE_PROMPT
    )
    loop.ready()
    assert loop.turn_ended("lo, ", called_tools=False, finish_reason="max_tokens") == ContinueCut(
        CONTINUE_PROMPT
    )
    loop.ready()
    assert loop.turn_ended("world", called_tools=False, finish_reason="stop") == WaitQuiet()
    assert loop.quiet(inbox=False) == Finish("Hello, world")


def test_an_answer_cut_once_too_often_fails_with_output_limit() -> None:
    loop = AgentLoop("a", max_turns=5, continue_limit=1)
    loop.ready()
    assert isinstance(loop.turn_ended("x", called_tools=False, finish_reason="length"), ContinueCut)
    loop.ready()
    step = loop.turn_ended("y", called_tools=False, finish_reason="length")
    assert isinstance(step, Fail)
    assert step.error_type == "output_limit"
    assert "after 1 continuation(s)" in step.message


def test_without_continuations_a_cut_answer_is_final_as_it_is() -> None:
    loop = AgentLoop("a", max_turns=5, continue_limit=0)
    loop.ready()
    assert loop.turn_ended("cut", called_tools=False, finish_reason="length") == WaitQuiet()
    assert loop.quiet(inbox=False) == Finish("cut")


def test_tool_calls_forget_the_parts_of_a_cut_answer() -> None:
    loop = AgentLoop("a", max_turns=5, continue_limit=3)
    loop.ready()
    loop.turn_ended("old", called_tools=False, finish_reason="length")
    loop.ready()
    loop.turn_ended("", called_tools=True, finish_reason="tool_calls")
    loop.ready()
    loop.turn_ended("new", called_tools=False, finish_reason="stop")
    assert loop.quiet(inbox=False) == Finish("new")


def test_a_paused_turn_is_sent_back_for_the_provider_to_go_on() -> None:
    loop = AgentLoop("a", max_turns=5)
    loop.ready()
    assert loop.turn_ended("half", called_tools=False, finish_reason="pause_turn") == NextTurn()


def test_a_message_that_arrives_while_waiting_means_another_turn() -> None:
    loop = AgentLoop("a", max_turns=5)
    loop.ready()
    loop.turn_ended("first answer", called_tools=False, finish_reason="stop")
    assert loop.quiet(inbox=True) == NextTurn()
    loop.ready()
    loop.turn_ended("second answer", called_tools=False, finish_reason="stop")
    assert loop.quiet(inbox=False) == Finish("second answer")


def test_continued_after_its_answer_it_does_not_answer_again() -> None:
    loop = AgentLoop("a", max_turns=5)
    assert loop.answered("given before the takeover") == WaitQuiet()
    assert loop.quiet(inbox=False) == Finish("given before the takeover")
    again = AgentLoop("a", max_turns=5)
    again.answered("given")
    assert again.quiet(inbox=True) == NextTurn()


def test_a_conversation_over_the_threshold_is_compacted_first() -> None:
    loop = AgentLoop("a", max_turns=5, max_context_tokens=100)
    assert loop.ready(context_tokens=100) == AskModel()
    assert loop.ready(context_tokens=101) == Compact("threshold")
    assert loop.compacted() == AskModel()  # the turn it made room for, counted once
    assert loop.turns == 2
    assert AgentLoop("a", max_turns=5).ready(context_tokens=10**9) == AskModel()


@given(
    st.lists(
        st.tuples(st.booleans(), st.sampled_from(["stop", "length", "tool_calls", "pause_turn"])),
        max_size=30,
    ),
    st.integers(1, 10),
    st.integers(0, 3),
)
def test_the_loop_never_asks_more_than_max_turns(
    turns: list[tuple[bool, str]], max_turns: int, continue_limit: int
) -> None:
    """Whatever the turns say, the model is asked at most `max_turns` times, and the
    loop ends in exactly one Finish or Fail once it says so."""
    loop = AgentLoop("a", max_turns=max_turns, continue_limit=continue_limit)
    step = loop.start()
    asked = 0
    script = iter(turns)
    while True:
        if isinstance(step, NextTurn):
            step = loop.ready()
        elif isinstance(step, AskModel):
            asked += 1
            called, reason = next(script, (False, "stop"))
            step = loop.turn_ended("t", called_tools=called, finish_reason=reason)
        elif isinstance(step, ContinueCut):
            step = loop.continued()
        elif isinstance(step, WaitQuiet):
            step = loop.quiet(inbox=False)
        else:
            assert isinstance(step, Finish | Fail)
            break
    assert asked <= max_turns
    if isinstance(step, Fail):
        assert step.error_type in {"max_turns", "output_limit"}
