"""The event loop `kdelay serve` runs on: uvloop's when it is installed, asyncio's own
otherwise.

Measured on the broker's produce path (bench/broker.py's requests replayed, 1,000,000
records over one connection, five alternating pairs on the shared 2-core machine): the
broker process's CPU per record was lower with uvloop in every pair, median 290 ns
against 340 ns (its socket reads, writes and callbacks are C, not Python). The protocol
and the handlers are the same on both loops. `kdelay.Broker` (a loop on a thread of the
caller's process) keeps asyncio's loop; so does a platform uvloop does not support.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run(main: Coroutine[Any, Any, Any]) -> Any:
    """asyncio.run(main) on uvloop's loop where uvloop is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
