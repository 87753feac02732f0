"""The one wall clock: integer milliseconds since the epoch."""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]


def wall_clock() -> int:
    """Milliseconds since the epoch, from the system's real-time clock."""
    return time.time_ns() // 1_000_000
