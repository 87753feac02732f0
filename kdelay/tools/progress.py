"""The progress bar every long-running `kdelay` command shows (on a terminal only)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable


def fmt_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"
    raise AssertionError



class ProgressBar:
    """A one-line progress bar on stderr for scans that take a while: drawn only after
    about a second has passed, and never when stderr is not a terminal
    (KDELAY_PROGRESS=always forces it, KDELAY_PROGRESS=0 turns it off)."""

    WIDTH = 28

    def __init__(self, label: str, total: int, stream=None,
                 fmt: Callable[[int], str] = fmt_size):
        self.stream = stream if stream is not None else sys.stderr
        self.fmt = fmt  # how amounts are shown: sizes by default, counts for the demo
        mode = os.environ.get("KDELAY_PROGRESS", "auto")
        tty = False
        with contextlib.suppress(AttributeError, ValueError):  # closed or odd streams
            tty = self.stream.isatty()
        self.enabled = total > 0 and mode != "0" and (mode == "always" or tty)
        try:
            self.delay = float(os.environ.get("KDELAY_PROGRESS_DELAY", "1.0"))
        except ValueError:
            self.delay = 1.0
        self.label = label
        self.total = total
        self.done = 0
        self.start = time.monotonic()
        self.last_draw = 0.0
        self.drawn = 0

    def __call__(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start >= self.delay and now - self.last_draw >= 0.1:
            self.last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = min(1.0, self.done / self.total)
        k = int(frac * self.WIDTH)
        rate = self.done / max(now - self.start, 1e-9)
        text = (f"{self.label} [{'#' * k}{'.' * (self.WIDTH - k)}] {frac * 100:3.0f}%  "
                f"{self.fmt(self.done)} / {self.fmt(self.total)}  {self.fmt(int(rate))}/s")
        pad = " " * max(0, self.drawn - len(text))
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self.drawn = len(text)

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * self.drawn + "\r")
            self.stream.flush()
            self.drawn = 0
