"""TLS from PEM files, with the standard library's ssl."""

from __future__ import annotations

import ssl

from ..errors import BrokerConfigError


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context (TLS 1.2 or later) for the certificate chain and key in PEM files;
    BrokerConfigError naming the file when they do not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise BrokerConfigError(f"cannot load the TLS certificate {cert} and key {key}: "
                                f"{e}") from None
    return context
