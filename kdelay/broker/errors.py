"""The broker's own errors. Kafka error codes are kio's `ErrorCode` enum."""

from __future__ import annotations

from ..errors import KdelayError


class FrameError(KdelayError):
    """A frame the broker cannot answer (oversized, truncated, unparsable, an unknown API or
    version where the protocol has no error answer): its connection is closed."""


class BrokerConfigError(KdelayError):
    """A broker-wide setting (a --config, a listener) is unknown or out of range."""
