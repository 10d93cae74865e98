"""Which deliveries one run's events make: the config's webhooks, the run's own (its
`run` op's `webhooks`) and its channels (an A2A push config), each matched against
the run's events in seq order. Pure: the outbox feeds it journaled entries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Protocol

from orchestrator.core.hooks import fill_json
from orchestrator.core.webhooks import (
    MAX_BODY,
    Delivery,
    Matcher,
    WebhookSpec,
    message_id,
    standard_body,
)
from orchestrator.storage.base import RunRecord
from orchestrator.storage.runlog import Entry

__all__ = ["Channel", "RunSubscriptions"]


class Channel(Protocol):
    """A run's subscription that makes its own bodies (an A2A push config): it sees
    every event of the run from seq 1, in order, and says what to send for each."""

    name: str
    """`<kind>:<id>`, unique in its run."""
    url: str
    headers: dict[str, str]
    from_seq: int
    """Events up to this seq are only seen (they came before the subscription)."""

    def bodies(self, entry: Entry) -> list[tuple[str, bytes]]:
        """What to send for `entry`: (a type shown in lists, the JSON body) each."""
        ...


class _Hook:
    __slots__ = ("matcher", "name", "secret", "template", "url")

    def __init__(self, name: str, spec: WebhookSpec, record: RunRecord, secret: bool) -> None:
        self.name = name
        self.url = spec.url
        self.template = spec.body_template
        self.secret = spec.secret if secret else None
        self.matcher: Matcher = spec.matcher(
            root_agent_id=record.agent_id, root_session_id=record.root_session_id
        )


def _body(hook: _Hook, standard: bytes) -> bytes:
    """What `hook` is sent: the standard body, or its template filled from it (one
    that would fill past `MAX_BODY` characters sends an `error` saying so instead)."""
    if hook.template is None:
        return standard
    try:
        made = fill_json(hook.template, json.loads(standard), MAX_BODY)
    except ValueError:
        made = {"error": f"the filled body_template passes {MAX_BODY} characters"}
    return json.dumps(made, ensure_ascii=False, separators=(",", ":")).encode()


class RunSubscriptions:
    """Everything one run's events are matched against.

    Args:
        record: the run (its own webhooks are in its options).
        config: the server's webhooks, by name (their secrets stay with the config).
        channels: the run's channels.
        its_own: match the run's own webhooks too (False: only `config` and `channels`).
    """

    def __init__(
        self,
        record: RunRecord,
        config: Mapping[str, WebhookSpec],
        channels: Sequence[Channel],
        *,
        its_own: bool = True,
    ) -> None:
        self.run_id = record.run_id
        self._hooks = [_Hook(name, spec, record, False) for name, spec in config.items()]
        own = record.options.webhooks if record.options and its_own else ()
        self._hooks += [_Hook(f"run:{i}", spec, record, True) for i, spec in enumerate(own)]
        self._channels = list(channels)
        self.seen = 0
        """The last seq its channels have seen."""

    @property
    def empty(self) -> bool:
        """Nothing to match (no webhook and no channel)."""
        return not self._hooks and not self._channels

    @property
    def has_channels(self) -> bool:
        """It has channels (they must see the run's events from seq 1)."""
        return bool(self._channels)

    def see(self, entries: Sequence[Entry]) -> None:
        """Entries already matched before: channels take them in, nothing is made."""
        for entry in entries:
            if entry.seq > self.seen:
                for channel in self._channels:
                    channel.bodies(entry)
                self.seen = entry.seq

    def match(self, entries: Sequence[Entry], now: float) -> list[Delivery]:
        """The deliveries `entries` make, in seq order."""
        out: list[Delivery] = []
        for entry in entries:
            event = entry.event
            for hook in self._hooks:
                if hook.matcher.matches(event):
                    out.append(
                        Delivery(
                            id=message_id(hook.name, self.run_id, entry.seq),
                            webhook=hook.name,
                            url=hook.url,
                            run_id=self.run_id,
                            seq=entry.seq,
                            type=str(event.type),
                            body=_body(hook, standard_body(event, entry.raw)),
                            created_at=now,
                            next_at=now,
                            secret=hook.secret,
                        )
                    )
            if entry.seq > self.seen:
                self.seen = entry.seq
                for channel in self._channels:
                    made = channel.bodies(entry)
                    if entry.seq > channel.from_seq:
                        out += self._of_channel(channel, entry.seq, made, now)
        return out

    def _of_channel(
        self, channel: Channel, seq: int, made: list[tuple[str, bytes]], now: float
    ) -> list[Delivery]:
        return [
            Delivery(
                id=message_id(channel.name, self.run_id, seq, part),
                webhook=channel.name,
                url=channel.url,
                run_id=self.run_id,
                seq=seq,
                type=kind,
                body=body,
                created_at=now,
                next_at=now,
                headers=channel.headers or None,
            )
            for part, (kind, body) in enumerate(made)
        ]
