"""An A2A agent served by the `a2a-sdk`'s own server (Starlette on uvicorn, asyncio):
the other side of the interop tests, as a team would run it. Not our code's style
(asyncio) on purpose: it is the reference implementation we talk to.

    python tests/a2a_reference_agent.py MARKER_DIR     # prints "listening on PORT"

What it does depends on the message: `fail …` fails; `wait …` works until cancelled
(and writes MARKER_DIR/cancelled when it is); `ask …` asks for more input (`which?`:
the task's next message is the answer, and is worked on as a message is); anything
else streams three status messages and an answer artifact in two chunks. A request
with `Authorization: Bearer wrong` is refused (401).
"""

from __future__ import annotations

import asyncio  # noqa: TID251 (the SDK's server is asyncio: this is the other side)
import socket
import sys
from pathlib import Path

import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import PlainTextResponse

MARKERS = Path(sys.argv[1])


class Researcher(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = context.get_user_input()
        await updater.start_work()
        if text.startswith("fail"):
            await updater.failed(updater.new_agent_message([new_text_part("no sources found")]))
            return
        if text.startswith("ask"):
            await updater.requires_input(updater.new_agent_message([new_text_part("which?")]))
            return
        if text.startswith("wait"):
            for step in range(600):
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    message=updater.new_agent_message([new_text_part(f"still at it ({step}) ")]),
                )
                await asyncio.sleep(0.05)
            return
        for doing in ("reading ", "comparing ", "writing "):
            await updater.update_status(
                TaskState.TASK_STATE_WORKING,
                message=updater.new_agent_message([new_text_part(doing)]),
            )
        await updater.add_artifact([new_text_part("trio: ")], artifact_id="a1", name="answer")
        await updater.add_artifact(
            [new_text_part(f"structured ({text})")], artifact_id="a1", append=True
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        (MARKERS / "cancelled").write_text(context.task_id or "")
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class Tokens(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):  # type: ignore[no-untyped-def]
        if request.headers.get("authorization") == "Bearer wrong":
            return PlainTextResponse("unauthorized", status_code=401)
        return await call_next(request)


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    card = AgentCard(
        name="researcher",
        description="The research team's agent",
        version="1.0",
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        capabilities=AgentCapabilities(streaming=True),
        skills=[AgentSkill(id="research", name="research", description="r", tags=["r"])],
        supported_interfaces=[
            AgentInterface(
                protocol_binding="JSONRPC", url=f"http://127.0.0.1:{port}/", protocol_version="1.0"
            )
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=Researcher(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
    app = Starlette(routes=routes, middleware=[Middleware(Tokens)])
    print(f"listening on {port}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
