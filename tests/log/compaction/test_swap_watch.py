"""kdelay.log.compaction.swap_watch: a compaction's swap as lock-free readers see it."""

from __future__ import annotations

import os
import threading
import time

from kdelay import Log
from kdelay.log.compaction.swap_watch import between_swaps, swapping, wait_out_swaps
from kdelay.log.segments.layout import segment_file


def test_only_a_segments_log_swap_is_a_swap_in_progress() -> None:
    assert swapping(["00000000000000000000.log", f"{7:020d}.log.swap"])
    assert not swapping(["00000000000000000000.log", f"{7:020d}.index.swap",
                         f"{7:020d}.log.cleaned", "x.log.swap", "00000000000000000000.log"])
    assert not swapping([])


def test_waits_while_the_lock_is_held_and_no_longer(tmp_path) -> None:
    path = str(tmp_path / "p")
    tries: list[float] = []

    def never():
        tries.append(time.monotonic())

    with Log.open(path):  # a live writer: worth waiting for
        t0 = time.monotonic()
        assert wait_out_swaps(path, never, 0.2) is None
        assert time.monotonic() - t0 >= 0.2 and len(tries) > 5
        tries.clear()
        assert wait_out_swaps(path, lambda: len(tries) if len(tries) == 5 else never(),
                              5) == 5  # the attempt that returns something is the answer
    tries.clear()
    assert wait_out_swaps(path, never, 5) is None and len(tries) == 1  # nobody: no wait


def test_between_swaps_lists_once_the_swap_is_done(tmp_path) -> None:
    path = str(tmp_path / "p")
    with Log.open(path):
        swap = segment_file(path, 0, ".log.swap")
        open(swap, "wb").close()
        threading.Timer(0.2, os.remove, [swap]).start()
        names = between_swaps(path, 10)
        assert names is not None and not swapping(names)
        open(swap, "wb").close()
        assert between_swaps(path, 0.05) is None  # still there when the time is up
    assert between_swaps(path, 10) is None  # left half done, nobody to finish it
