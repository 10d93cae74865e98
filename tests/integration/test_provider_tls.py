"""A model behind HTTPS with a certificate of a private CA (trustme): trusted through
the model's `tls.ca_file`, refused with the handshake's reason without it, a client
certificate presented where the provider asks for one, and a file that cannot be
loaded named at start (docs/configuration.md, `tls`)."""

from __future__ import annotations

import functools
import ssl
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from agents.errors import SpecError
from orchestrator.core.events import EventType
from orchestrator.runtime.engine import Orchestrator
from tests.fakes.provider_server import FakeOpenAI, Reply
from tests.helpers import collect, write_config

pytestmark = pytest.mark.trio


def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
    return Reply("over TLS, word by word")


async def serve_https(nursery: trio.Nursery, context: ssl.SSLContext) -> tuple[FakeOpenAI, str]:
    fake = FakeOpenAI(brain)
    listeners = await nursery.start(
        functools.partial(trio.serve_ssl_over_tcp, fake.handle, 0, context, host="127.0.0.1")
    )
    port = listeners[0].transport_listener.socket.getsockname()[1]
    return fake, f"https://127.0.0.1:{port}/v1"


def config(tmp_path: Path, url: str, tls: dict[str, str] | None) -> Any:
    model: dict[str, Any] = {
        "provider": "openai",
        "base_url": url,
        "model": "m",
        "max_retries": 0,
        "read_timeout": 10,
    }
    if tls is not None:
        model["tls"] = tls
    agents = {"critic": {"description": "d", "instructions": "ROLE: critic"}}
    return write_config(tmp_path, agents, models={"default": model})


async def test_a_private_ca_is_trusted_through_the_models_ca_file(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    async with trio.open_nursery() as nursery:
        fake, url = await serve_https(nursery, server)
        async with Orchestrator.open(config(tmp_path, url, {"ca_file": "ca.pem"})) as orch:
            events = await collect(orch, "critic", "q")
        assert events[-1].data["status"] == "completed"
        assert events[-1].data["result"] == "over TLS, word by word"
        assert len(fake.requests) == 1

        # Without it the system's trust store does not know the CA: the turn fails,
        # and says why (it said nothing: "connection to https://… failed: ").
        async with Orchestrator.open(config(tmp_path, url, None)) as orch:
            events = await collect(orch, "critic", "q")
        (error,) = [e for e in events if e.type is EventType.AGENT_ERROR]
        assert error.data["errorType"] == "provider_error"
        assert (
            f"connection to {url}/chat/completions failed: TLS handshake failed: "
            "certificate verify failed: unable to get local issuer certificate"
        ) in error.data["message"]
        nursery.cancel_scope.cancel()


async def test_a_client_certificate_is_presented_where_the_provider_asks(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    client = ca.issue_cert("orchestrator@example.org")
    client.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "client.pem"))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    ca.configure_trust(server)
    server.verify_mode = ssl.CERT_REQUIRED
    async with trio.open_nursery() as nursery:
        fake, url = await serve_https(nursery, server)
        tls = {"ca_file": "ca.pem", "client_cert": "client.pem"}
        async with Orchestrator.open(config(tmp_path, url, tls)) as orch:
            events = await collect(orch, "critic", "q")
        assert events[-1].data["status"] == "completed"
        async with Orchestrator.open(config(tmp_path, url, {"ca_file": "ca.pem"})) as orch:
            events = await collect(orch, "critic", "q")
        (error,) = [e for e in events if e.type is EventType.AGENT_ERROR]
        assert "failed:" in error.data["message"] and len(fake.requests) == 1
        nursery.cancel_scope.cancel()


async def test_a_tls_file_that_cannot_be_loaded_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate")
    for tls, said in (
        ({"ca_file": "nope.pem"}, "models.default.tls.ca_file: cannot load "),
        ({"ca_file": "junk.pem"}, "models.default.tls.ca_file: cannot load "),
        ({"client_cert": "junk.pem"}, "models.default.tls.client_cert: cannot load "),
        ({"client_key": "junk.pem"}, "models.default.tls.client_key needs client_cert"),
    ):
        with pytest.raises(SpecError, match=said):
            async with Orchestrator.open(config(tmp_path, "https://127.0.0.1:9/v1", tls)):
                pass
