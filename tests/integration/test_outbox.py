"""The webhooks outbox on a real journal, with a sender that records its attempts:
events journaled while no outbox ran are matched at its next start (from the run's
cursor: a crash between a commit and the outbox's write loses nothing); matching pauses
at `max_outbox` and goes on; dead letters past `max_dead` are forgotten oldest first; a
webhook taken out of the config kills its waiting deliveries at once."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from agents.core.events import UsageData
from agents.core.payloads import AgentResultData
from orchestrator.config import WebhookLimits
from orchestrator.core.bus import Bus, RunSink
from orchestrator.core.events import EventType
from orchestrator.core.webhooks import Delivery, WebhookSpec
from orchestrator.storage.journal import Journal
from orchestrator.storage.memory import MemoryStorage
from orchestrator.webhooks.outbox import Outbox
from tests.helpers import eventually
from tests.memory_server import autojump
from tests.unit.test_journal import record

SECRET = "whsec_" + base64.b64encode(b"o" * 32).decode()
HOOK = WebhookSpec(url="https://example.com/hook", events=["AGENT_STARTED"], secret=SECRET)


class Recorder:
    """A sender: answers what `answer(delivery)` says (None: taken), after `gate`."""

    def __init__(self, answer: Callable[[Delivery], str | None] = lambda d: None) -> None:
        self.answer = answer
        self.sent: list[str] = []
        self.gate = trio.Event()
        self.gate.set()

    async def attempt(self, delivery: Delivery, key: bytes | None) -> str | None:
        await self.gate.wait()
        self.sent.append(delivery.id)
        return self.answer(delivery)


def emit(journal: Journal, run_id: str, count: int, bus: Bus | None = None) -> Bus:
    if bus is None:
        journal.create_run(record(run_id))
        bus = Bus(RunSink(run_id, "sess-1", journal.outlet(run_id)))
    for i in range(count):
        bus.emit_nowait(EventType.AGENT_STARTED, {"agentId": f"a{i}", "task": "t"})
    return bus


@asynccontextmanager
async def running(
    journal: Journal, sender: Recorder, webhooks: dict[str, WebhookSpec], **limits: float
) -> AsyncIterator[Outbox]:
    outbox = Outbox(webhooks, WebhookLimits(**limits), journal, sender)  # type: ignore[arg-type]
    await outbox.start()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.run)
        yield outbox
        nursery.cancel_scope.cancel()


@autojump
async def test_events_journaled_while_no_outbox_ran_are_matched_at_its_start() -> None:
    storage = MemoryStorage()
    async with Journal.open(storage) as journal:
        sender = Recorder()
        async with running(journal, sender, {"ci": HOOK}) as outbox:
            bus = emit(journal, "run-1", 3)
            await eventually(lambda: len(sender.sent) == 3 and outbox.idle)
        emit(journal, "run-1", 4, bus)  # (the outbox stopped: a crash; the run went on)
        await journal.writer.flush()
        later = Recorder()
        async with running(journal, later, {"ci": HOOK}) as outbox:
            await eventually(lambda: len(later.sent) == 4 and outbox.idle)
    assert not set(later.sent) & set(sender.sent)  # from the cursor on, not again


@autojump
async def test_matching_pauses_at_max_outbox_and_goes_on() -> None:
    async with Journal.open(MemoryStorage()) as journal:
        sender = Recorder()
        sender.gate = trio.Event()  # (the receiver hangs)
        async with running(journal, sender, {"ci": HOOK}, max_outbox=10, concurrency=2) as outbox:
            emit(journal, "run-1", 35)
            await journal.writer.flush()
            await eventually(lambda: len(outbox.waiting) == 10)
            await trio.sleep(0.1)
            assert len(outbox.waiting) == 10  # (the rest stay in the journal meanwhile)
            sender.gate.set()
            await eventually(lambda: len(sender.sent) == 35 and outbox.idle)
        assert len(set(sender.sent)) == 35


@autojump
async def test_dead_letters_past_max_dead_are_forgotten_oldest_first() -> None:
    async with Journal.open(MemoryStorage()) as journal:
        sender = Recorder(answer=lambda d: "HTTP 500")
        async with running(journal, sender, {"ci": HOOK}, max_attempts=1, max_dead=3) as outbox:
            emit(journal, "run-1", 5)
            await eventually(lambda: outbox.dead_total == 5)
            assert len(outbox.listed(dead=True)) == 3 and outbox.dead_dropped == 2
        kept = await journal.storage.load_kept("outbox")
        assert sorted(k for k in kept if k.startswith("d:")) == sorted(
            f"d:{d.id}" for d in outbox.listed(dead=True)
        )


@autojump
async def test_a_webhook_no_longer_configured_kills_its_deliveries_at_once() -> None:
    storage = MemoryStorage()
    async with Journal.open(storage) as journal:
        sender = Recorder()
        sender.gate = trio.Event()
        async with running(journal, sender, {"ci": HOOK}):
            emit(journal, "run-1", 2)
            await journal.writer.flush()
            await trio.sleep(0.1)  # (matched and kept, not sent)
        later = Recorder()
        async with running(journal, later, {}) as outbox:  # "ci" left the config
            await eventually(lambda: outbox.dead_total == 2)
        assert later.sent == []
        assert {d.last_error for d in outbox.dead.values()} == {
            "webhook 'ci' is no longer configured"
        }


@autojump
async def test_a_receiver_that_hangs_takes_a_quarter_of_the_attempts_at_most() -> None:
    slow = WebhookSpec(url="https://slow.example.com/h", events=["AGENT_STARTED"], secret=SECRET)
    fast = WebhookSpec(url="https://fast.example.com/h", events=["AGENT_RESULT"], secret=SECRET)
    hung = trio.Event()  # (never set: the slow receiver never answers)
    taken: list[str] = []

    class Hosts(Recorder):
        async def attempt(self, delivery: Delivery, key: bytes | None) -> str | None:
            if "slow" in delivery.url:
                self.sent.append(delivery.id)
                await hung.wait()
            taken.append(delivery.id)
            return None

    sender = Hosts()
    hooks = {"slow": slow, "fast": fast}
    async with (
        Journal.open(MemoryStorage()) as journal,
        running(journal, sender, hooks, concurrency=8) as outbox,
    ):
        bus = emit(journal, "run-1", 10)  # ten for the slow receiver, due first
        await eventually(lambda: len(sender.sent) == 2)
        none: UsageData = {"inputTokens": 0, "outputTokens": 0}
        result: AgentResultData = {"text": "ok", "usage": none, "subtreeUsage": none}
        for _ in range(5):
            bus.emit_nowait(EventType.AGENT_RESULT, result)
        await eventually(lambda: len(taken) == 5)  # the fast one is not held up
        await trio.sleep(0.1)
        assert len(sender.sent) == 2  # 8 // 4 at a time to one receiver
        assert len(outbox.waiting) == 10
