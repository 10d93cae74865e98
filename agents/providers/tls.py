"""TLS for a model's endpoint: the certificates to trust and to present (`tls:` of a
model entry), and why a handshake failed, in words.

Verification is always on. `ca_file` adds to the system's trust store (it does not
replace it), so a model behind a private CA or a self-signed gateway is trusted by
naming that certificate, never by turning checks off.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from agents.errors import SpecError
from agents.model_config import TlsConfig

__all__ = ["tls_context", "tls_failure"]


def tls_context(name: str, tls: TlsConfig, base: Path) -> ssl.SSLContext:
    """The SSL context of model `name` (paths relative to `base`).

    Raises:
        SpecError: a file is missing or is not what it should be (naming the model,
            the setting and the file).
    """
    context = ssl.create_default_context()
    if tls.ca_file is not None:
        path = base / tls.ca_file
        try:
            context.load_verify_locations(cafile=path)
        except (OSError, ssl.SSLError) as exc:
            raise SpecError(f"models.{name}.tls.ca_file: cannot load {path}: {_why(exc)}") from None
    if tls.client_cert is not None:
        cert = base / tls.client_cert
        key = base / tls.client_key if tls.client_key is not None else None
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise SpecError(
                f"models.{name}.tls.client_cert: cannot load {cert}"
                f"{f' with {key}' if key else ''}: {_why(exc)}"
            ) from None
    elif tls.client_key is not None:
        raise SpecError(f"models.{name}.tls.client_key needs client_cert")
    return context


def tls_failure(exc: BaseException) -> str | None:
    """Why a connection failed in its TLS handshake, in words (None: not a TLS
    failure). httpx says nothing of it: the reason is in the exception's chain."""
    seen: BaseException | None = exc
    for _ in range(8):  # (a chain is short; never loop on a cycle)
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"TLS handshake failed: certificate verify failed: {seen.verify_message}"
        if isinstance(seen, ssl.SSLError):
            return f"TLS handshake failed: {_why(seen)}"
        seen = seen.__cause__ or seen.__context__
    return None


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__
