"""How a run goes on from its journal: what it emits first, and how each agent starts.

Every run starts from a plan. A fresh run's plan is empty; a restart, a takeover
and a fork are plans rebuilt from the journal (`core/rebuild.py`, `core/fork.py`).
`Continuation` reads one and answers, without I/O (tested without trio, as
`agents/core/loop.py` is):

- `opening`: the events that open the run: RUN_STARTED for a fresh run; for one that
  goes on, RUN_RESUMED, TURN_ABANDONED for each cut-off turn, AGENT_ERROR for each
  orphan (an agent nobody waits for) and for each agent the plan ends at once.
- `root` and `start`: how the root, and the child of a spawn call, start: `Fresh`
  (nothing journaled), `Continue` (a local agent rebuilt mid-run), `Answered` (it had
  ended: its journaled result or failure), `Follow` (a remote child's run, followed
  again from a cursor), `Lost` (a remote child that cannot be followed again: it and
  its open subtree end here).
- `background`: the background children to pick up again beside a continued agent.
- `approvals`: the calls that waited for a person, to wait again.
- `unresumed`: the ends of rebuilt agents the run ended before it continued them.
- `waiting`, `cancel_early`, `delivered`: a person's control that comes before its
  agent is rebuilt (a takeover reads the control stream as soon as the run starts)
  waits for it, and a message the journal shows is not delivered twice.

`runtime/children.py` carries a start out; `runtime/run.py` emits the opening.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agents.core.messages import Message, ToolCall
from agents.core.payloads import AgentErrorData, agent_error
from orchestrator.core.events import EventType, RemoteRef, Source
from orchestrator.core.rebuild import AgentPlan, ResumePlan

__all__ = [
    "FRESH",
    "Again",
    "Answered",
    "Continuation",
    "Continue",
    "EarlierAgent",
    "Follow",
    "Fresh",
    "Kind",
    "Lost",
    "Opening",
    "Start",
    "ThreadStart",
    "Transcripts",
    "WaitingApproval",
]

Kind = Literal["local", "remote", "a2a"]
"""How a subagent runs: here, on another of our servers (`remote.url`), or as an A2A
agent's task (`remote.a2a`)."""


@dataclass(frozen=True, slots=True)
class Fresh:
    """Nothing journaled: the agent starts from its input (after `history`: the
    conversation its thread left, for the root of a thread's next run)."""

    history: tuple[Message, ...] = ()


FRESH = Fresh()


@dataclass(frozen=True, slots=True)
class Continue:
    """A local agent that was running: rebuilt (its Source, its conversation, its calls
    in flight) and going on from where it was."""

    plan: AgentPlan
    background: bool = False
    """A background child: it reports to its parent as such (no deadline)."""


@dataclass(frozen=True, slots=True)
class Answered:
    """An agent that had ended: its result is the journaled one."""

    plan: AgentPlan
    background: bool = False

    @property
    def result(self) -> str | None:
        """Its final text (None: it failed, `error`)."""
        return self.plan.result

    @property
    def structured(self) -> Any:
        """Its validated answer (UNSET: it had no output schema)."""
        return self.plan.structured

    @property
    def error(self) -> str:
        """What its AGENT_ERROR said."""
        return self.plan.error or "failed"

    @property
    def error_type(self) -> str:
        """Its AGENT_ERROR's `errorType`."""
        return self.plan.error_type or "failed"


@dataclass(frozen=True, slots=True)
class Follow:
    """A remote child whose run went on over there: followed again from `cursor`."""

    plan: AgentPlan
    cursor: RemoteRef
    below: dict[str, Source]
    """The forwarded agents of its subtree that had not ended, by agentKey."""
    background: bool = False


@dataclass(frozen=True, slots=True)
class Lost:
    """A remote child that is not followed again: it and its open subtree end here,
    `worker_lost` (deepest first, each agent exactly once), and its call fails (an A2A
    task is never followed again; another server's run is not when none of its events
    came through before the run stopped)."""

    plan: AgentPlan
    ends: tuple[Source, ...]
    kind: Kind
    background: bool = False


Again = Continue | Answered | Follow | Lost
"""How an agent the journal shows started goes on."""
Start = Fresh | Again
"""How an agent starts: the planner's answer for the root and for each spawn call."""


@dataclass(frozen=True, slots=True)
class EarlierAgent:
    """An agent of an earlier run of the thread, which `agent_spawn` may continue."""

    agent_key: str
    agent_id: str
    run_id: str
    task: str
    """Its first task (what it was spawned for)."""


class Transcripts(Protocol):
    """Where the conversations of a thread's earlier agents are read (`runs/threads.py`)."""

    async def conversation(self, run_id: str, agent_key: str | None = None) -> tuple[Message, ...]:
        """That agent's conversation at the end of that run.

        Raises:
            LookupError: it is gone, or has not ended.
        """
        ...


@dataclass(frozen=True, slots=True)
class ThreadStart:
    """Where a run stands in its thread (docs/threads.md): RUN_STARTED says it."""

    thread_id: str
    previous_run_id: str | None = None
    """The run whose conversation this one goes on from (None: the thread's first)."""
    continues_agent: str | None = None
    """The agent of that run whose conversation the root continues (None: its root)."""
    history: tuple[Message, ...] = ()
    """That conversation, as its model saw it; the run's input follows it."""
    earlier: tuple[EarlierAgent, ...] = ()
    """The ended agents of the runs that conversation comes from, newest first (at most
    `runs.threads.EARLIER`): `agent_spawn` may continue them by agentKey."""
    transcripts: Transcripts | None = None
    """Where their conversations are read (None: nowhere, and `earlier` is empty)."""

    def earlier_agent(self, agent_key: str) -> EarlierAgent | None:
        """The earlier agent `agent_key` (None: not one of `earlier`)."""
        return next((a for a in self.earlier if a.agent_key == agent_key), None)

    def started(self) -> dict[str, object]:
        """RUN_STARTED's thread fields."""
        data: dict[str, object] = {"threadId": self.thread_id}
        if self.previous_run_id is not None:
            data["previousRunId"] = self.previous_run_id
            if self.continues_agent is not None:
                data["continues"] = {
                    "runId": self.previous_run_id,
                    "agentKey": self.continues_agent,
                }
        return data


@dataclass(frozen=True, slots=True)
class Opening:
    """One event that opens the run (`source` None: the run's or the root's)."""

    source: Source | None
    type: EventType
    data: Mapping[str, object]
    last: bool = False


@dataclass(frozen=True, slots=True)
class WaitingApproval:
    """A call that waited for a person when the journal stopped: it waits again, for
    the rest of its timeout."""

    agent: AgentPlan
    call: ToolCall
    requested_at: float
    timeout_at: float


_LOST = {"restart": "when the server restarted", "fork": "in the fork (its subtree ran elsewhere)"}
"""How an orphan's AGENT_ERROR says it was lost, by RUN_RESUMED's `reason`."""


@dataclass
class Continuation:
    """How one run goes on from its journal (a fresh run: the empty plan).

    Args:
        plan: the run's agents as the journal left them.
        kinds: how each subagent runs (an agentId not listed runs here).
        resumed: RUN_RESUMED's data (`attempt`, `worker`, `afterSeq`, `reason`).
        thread: where the run stands in its thread (None: a run outside threads).
    """

    plan: ResumePlan = field(default_factory=ResumePlan)
    kinds: Mapping[str, Kind] = field(default_factory=dict)
    resumed: Mapping[str, object] = field(default_factory=dict)
    thread: ThreadStart | None = None

    # -- the run -------------------------------------------------------------------

    def opening(
        self, agent_id: str, input: str, extra: Mapping[str, object] | None = None
    ) -> list[Opening]:
        """The events that open the run, in order (`extra`: RUN_STARTED's fields of what
        the run was asked beyond its input: `outputSchema`, `attachments`)."""
        plan = self.plan
        if plan.fresh:
            started: dict[str, object] = {"agentId": agent_id, "input": input, **(extra or {})}
            if self.thread is not None:
                started.update(self.thread.started())
            return [Opening(None, EventType.RUN_STARTED, started)]
        opened = [Opening(None, EventType.RUN_RESUMED, dict(self.resumed))]
        reason = self.resumed.get("reason", "worker_lost")
        opened += [
            Opening(
                agent.source,
                EventType.TURN_ABANDONED,
                {"reason": reason, "attempt": self.resumed.get("attempt")},
            )
            for agent in plan.cut_off()
        ]
        lost = _LOST.get(str(reason), "with its worker")
        opened += [
            _ends(
                agent,
                agent_error(
                    "worker_lost",
                    f"agent {agent.agent_id!r} was lost {lost} and nobody waits for it any more",
                ),
            )
            for agent in plan.orphans()
        ]
        opened += [
            _ends(agent, agent_error(agent.error_type or "failed", agent.error or "ended"))
            for agent in plan.end_now
        ]
        return opened

    def root(self) -> Fresh | Continue | Answered:
        """How the root agent starts (`Answered`: only RUN_FINISHED was missing)."""
        if self.plan.fresh:
            return Fresh(self.thread.history) if self.thread is not None else FRESH
        root = self.plan.root
        return Answered(root) if root.ended else Continue(root)

    def start(self, parent_key: str | None, call_id: str) -> Start:
        """How the child of the spawn call `call_id` of agent `parent_key` starts."""
        parent = self.plan.agents.get(parent_key)
        child = self.plan.child_of(parent, call_id) if parent is not None else None
        return FRESH if child is None else self._again(child, background=False)

    def background(self, parent: AgentPlan) -> list[tuple[Again, str, str]]:
        """The background children to pick up again beside the continued `parent`, as
        (how each starts, its taskId, its spawn call's id)."""
        return [
            (self._again(child, background=True), task_id, call_id)
            for child, task_id, call_id in self.plan.background_of(parent)
        ]

    def approvals(self) -> list[WaitingApproval]:
        """The calls that waited for a decision (not a remote subtree's: those wait
        there), to wait again and be answerable before their agents reach them."""
        waiting = []
        for agent in self.plan.agents.values():
            if agent.ended or agent.key in self.plan.remote:
                continue
            for call in agent.pending:
                prior = agent.approvals.get(call.id)
                if isinstance(prior, tuple):
                    waiting.append(WaitingApproval(agent, call, prior[0], prior[1]))
        return waiting

    def unresumed(self, continued: set[str], status: str) -> list[Opening]:
        """The ends of rebuilt agents the run ended (`status`) before continuing them (a
        cancel during a takeover), so every agent still ends exactly once. `continued`:
        the agentKeys that were started again (`Continue`, `Answered`, `Follow`)."""
        plan = self.plan
        skip = continued | {agent.key for agent in plan.orphans() if agent.key is not None}
        # A remote child followed again brings its subtree's ends from its server.
        followed = tuple(
            child.source.path + "/"
            for key in continued
            if (child := plan.agents.get(key)) is not None and child.source is not None
        )
        ends = []
        for agent in plan.agents.values():
            if agent.key is None or agent.ended or agent.key in skip:
                continue
            if agent.key in plan.remote and agent.source and agent.source.path.startswith(followed):
                continue
            ends.append(
                _ends(
                    agent,
                    agent_error(
                        "cancelled" if status == "cancelled" else "worker_lost",
                        f"agent {agent.agent_id!r}: the run ended ({status}) before "
                        "it was continued after its worker's failure",
                    ),
                )
            )
        return ends

    # -- a control that comes before its agent is rebuilt ---------------------------

    def waiting(self, agent_key: str | None, continued: set[str]) -> AgentPlan | None:
        """The agent `agent_key` (None: the root) if it is a local agent of the journal
        that the run goes on with but has not started again yet (`continued`: the
        agentKeys started again): a `cancel` or `send` for it is kept in its plan
        (`cancel_early`, its `inbox`) rather than refused. None: no such agent."""
        plan = self.plan
        agent = plan.agents.get(agent_key)
        if agent is None or agent.ended:
            return None
        if agent_key is None:
            return agent  # (the root: the run knows whether it has made it)
        if agent_key in continued or agent_key in plan.remote:
            return None
        if self.kinds.get(agent.agent_id, "local") != "local":
            return None  # (a remote child: followed again or lost when its parent goes on)
        return None if any(a.key == agent_key for a in plan.orphans()) else agent

    def cancel_early(
        self,
        agent: AgentPlan,
        continued: set[str],
        *,
        by: str,
        reason: str | None,
        itself: bool,
    ) -> list[Opening]:
        """A person cancels `agent`: the agents of the journal below it (and, with
        `itself`, it: one not started again yet) that the run has not started again
        end now, deepest first, and are marked ended — the spawn call that would
        continue one answers with its error (`Answered`), and nothing ends twice.
        Without `itself`, `agent` runs here: its cancel stops it before it could
        start them again."""
        plan = self.plan
        how = f"cancelled by {'the user' if by == 'user' else by}" + (
            f": {reason}" if reason else ""
        )
        ends = []
        for open_agent in [*self._descendants(agent), *([agent] if itself else [])]:
            if open_agent.ended or open_agent.key in continued or open_agent.key in plan.remote:
                continue
            message = f"agent {open_agent.agent_id!r} was {how}"
            open_agent.ended, open_agent.error_type, open_agent.error = True, "cancelled", message
            ends.append(_ends(open_agent, agent_error("cancelled", message, by=by, reason=reason)))
        return ends

    def journaled(self, agent_key: str) -> AgentPlan | None:
        """The agent `agent_key` as the journal left it (None: it started in this run)."""
        return self.plan.agents.get(agent_key)

    def delivered(self, control: str) -> bool:
        """Whether the journal shows the message of the control request `control` (a
        run's new owner reads its control stream from the start: a `send` is
        delivered once)."""
        return any(
            control in agent.controls or any(m.control == control for m in agent.inbox)
            for agent in self.plan.agents.values()
        )

    def _descendants(self, top: AgentPlan) -> list[AgentPlan]:
        """The agents of the journal below `top`, deepest first."""
        by_parent: dict[str | None, list[AgentPlan]] = {}
        for agent in self.plan.agents.values():
            if agent.source is not None:
                by_parent.setdefault(agent.source.parent_session_id, []).append(agent)
        found: list[AgentPlan] = []
        sessions = [top.source.session_id if top.source is not None else None]
        while sessions:
            children = by_parent.get(sessions.pop(), [])
            found += children
            sessions += [c.source.session_id for c in children if c.source is not None]
        return sorted(found, key=lambda a: -(a.source.depth if a.source else 0))

    # -- one agent -------------------------------------------------------------------

    def _again(self, child: AgentPlan, *, background: bool) -> Again:
        """How a child the journal shows started goes on."""
        assert child.key is not None and child.source is not None
        if child.ended:
            return Answered(child, background)
        kind = self.kinds.get(child.agent_id, "local")
        if kind == "local":
            return Continue(child, background)
        cursor = self.plan.remote_cursor(child.key) if kind == "remote" else None
        top = child.source.path
        if cursor is None:
            ends = tuple(
                agent.source
                for agent in sorted(
                    self._open_below(top, itself=True),
                    key=lambda a: -(a.source.depth if a.source else 0),
                )
                if agent.source is not None
            )
            return Lost(child, ends, kind, background)
        below = {
            agent.key: agent.source
            for agent in self._open_below(top, itself=False)
            if agent.key is not None and agent.source is not None
        }
        return Follow(child, cursor, below, background)

    def _open_below(self, top: str, *, itself: bool) -> list[AgentPlan]:
        """The agents under the path `top` (and the one at it, with `itself`) that have
        not ended."""
        return [
            agent
            for agent in self.plan.agents.values()
            if agent.source is not None
            and not agent.ended
            and (agent.source.path.startswith(top + "/") or (itself and agent.source.path == top))
        ]


def _ends(agent: AgentPlan, data: AgentErrorData) -> Opening:
    return Opening(agent.source, EventType.AGENT_ERROR, data, last=True)
