"""A small OTLP/HTTP trace receiver on loopback: it decodes each `POST /v1/traces` body
with the `opentelemetry-proto` package and keeps the spans and the request headers."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import trio

__all__ = ["OtlpReceiver", "ReceivedSpan", "serve_otlp"]


@dataclass
class ReceivedSpan:
    """One span as the collector got it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    status: int
    """`STATUS_CODE_*` of the proto (0 unset, 1 ok, 2 error)."""
    start_ns: int
    end_ns: int
    service: str


@dataclass
class OtlpReceiver:
    spans: list[ReceivedSpan] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            await self._handle(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()

    async def _handle(self, stream: trio.SocketStream) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
            head, _, body = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            while len(body) < length:
                data = await stream.receive_some(65536)
                if not data:
                    return
                body += data
            buf = body[length:]
            self._decode(body[:length], headers)
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
                b"Content-Length: 0\r\n\r\n"
            )

    def _decode(self, body: bytes, headers: dict[str, str]) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        if headers.get("content-encoding") == "gzip":
            import gzip

            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.headers.append(headers)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status=span.status.code,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            service=str(resource.get("service.name", "")),
                        )
                    )


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


async def serve_otlp(nursery: trio.Nursery) -> OtlpReceiver:
    """Start a receiver on a free loopback port; it lives as long as `nursery`."""
    receiver = OtlpReceiver()
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, receiver.handle, 0, host="127.0.0.1")
    )
    receiver.port = listeners[0].socket.getsockname()[1]
    return receiver
