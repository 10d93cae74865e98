"""A2A push notifications: a task's push config as a channel of the webhooks outbox
(docs/remote.md#push-notifications).

A config (`CreateTaskPushNotificationConfig`, or the `configuration` of the message
that starts the task) is kept with the run in the outbox's store; the run's events
are turned into the task's updates (`TaskView`, as a stream has them) and each is
posted as an A2A `StreamResponse` — the status updates as they come, and once the
task has ended the whole task (its final state and answer artifact) — with the
config's token (`X-A2A-Notification-Token`) and `authentication` (`Authorization:
<scheme> <credentials>`). So a push goes through the outbox: kept across restarts,
retried, dead-lettered, never to an address `http_get` could not reach, and only to a
URL under `server.webhook_urls`.
"""

from __future__ import annotations

from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from orchestrator.a2a.mapping import TaskView
from orchestrator.storage.base import RunRecord
from orchestrator.storage.runlog import Entry

__all__ = ["KIND", "A2aPush", "config_of", "spec_of"]

KIND = "a2a"
"""The outbox's channel kind: a channel is named `a2a:<config id>`."""


def spec_of(config: pb.TaskPushNotificationConfig) -> bytes:
    """How a config is kept."""
    text: str = json_format.MessageToJson(config, indent=None)
    return text.encode()


def config_of(spec: bytes) -> pb.TaskPushNotificationConfig:
    """A kept config."""
    config = pb.TaskPushNotificationConfig()
    json_format.Parse(spec, config)
    return config


class A2aPush:
    """One push config of one task: the outbox's `Channel`."""

    def __init__(self, record: RunRecord, name: str, from_seq: int, spec: bytes) -> None:
        config = config_of(spec)
        self.name = name
        self.url = config.url
        self.from_seq = from_seq
        self.headers: dict[str, str] = {}
        if config.token:
            self.headers["X-A2A-Notification-Token"] = config.token
        auth = config.authentication
        if config.HasField("authentication") and auth.scheme and auth.credentials:
            self.headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
        context = record.context_id or record.thread_id or record.run_id
        self._view = TaskView(record.run_id, context)
        self._ended = False

    def bodies(self, entry: Entry) -> list[tuple[str, bytes]]:
        """The task's status updates `entry` makes; the whole task once it has ended
        (its answer's chunks are not pushed one by one: the task carries the answer)."""
        out: list[tuple[str, bytes]] = []
        for update in self._view.updates(entry.event):
            if self._ended or isinstance(update, pb.TaskArtifactUpdateEvent):
                continue
            if self._view.ended:
                self._ended = True
                response = pb.StreamResponse(task=self._view.task())
                out.append(("task", _json(response)))
            else:
                response = pb.StreamResponse(status_update=update)
                out.append(("statusUpdate", _json(response)))
        return out


def _json(message: pb.StreamResponse) -> bytes:
    text: str = json_format.MessageToJson(message, indent=None)
    return text.encode()
