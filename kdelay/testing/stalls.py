"""Stopping a worker process at a chosen file operation, so that a kill -9 test can kill it
exactly there (inside Log.open's recovery, inside a close...), where a kill at a random
moment rarely lands."""

from __future__ import annotations

import time
from collections.abc import Callable

from .. import fsio

__all__ = ["Stall"]


class Stall:
    """Wraps the fsio functions `names`. Between `start()` and `stop()` it counts their
    calls, and before the n-th call (from 0) of `op`, given as "op:n", prints "stalled"
    and sleeps until the parent kills the process. "-" stalls nowhere and wraps nothing."""

    def __init__(self, point: str, names: tuple[str, ...]):
        self.armed = False
        self.calls: dict[str, int] = {}
        if point == "-":
            return
        op, n = point.split(":")
        self.op, self.n = op, int(n)
        for name in names:
            setattr(fsio, name, self._wrap(name, getattr(fsio, name)))

    def start(self) -> None:
        """Count from 0 again, and stall at the point."""
        self.calls.clear()
        self.armed = True

    def stop(self) -> None:
        self.armed = False

    def _wrap(self, name: str, fn: Callable) -> Callable:
        def call(*args, **kwargs):
            if self.armed:
                n = self.calls[name] = self.calls.get(name, -1) + 1
                if name == self.op and n == self.n:
                    print("stalled", flush=True)  # the parent kills us here
                    time.sleep(600)
            return fn(*args, **kwargs)
        return call
