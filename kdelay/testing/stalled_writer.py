"""A writer process caught in the middle of an append, for tests of lock-free readers:
`python -m kdelay.testing.stalled_writer DIR`.

Opens the log at DIR, appends a few batches and rolls once (so there is a sealed segment
and an active one), then appends one more batch whose write stalls after its first
`STALL_AFTER` bytes, as a writer descheduled in the middle of a `pwrite` would: the .log
then ends in a short batch while the lock is held and the append horizon says an append
is in progress. Prints `stalled SIZE` (the active .log's size) and sleeps until killed.
"""

from __future__ import annotations

import os
import sys
import time

from .. import fsio
from ..config import LogConfig
from ..partition import Log
from ..records import Record

STALL_AFTER = 1000
BIG = 5000  # the stalled batch's value size: the batch is well over STALL_AFTER bytes


def _stalling_write(fd: int, data: bytes, position: int) -> None:
    """The first STALL_AFTER bytes reach the file; then the writer never runs again."""
    os.pwrite(fd, bytes(data)[:STALL_AFTER], position)
    print(f"stalled {os.fstat(fd).st_size}", flush=True)
    while True:
        time.sleep(3600)


def main(argv: list[str]) -> int:
    path = argv[0]
    log = Log.open(path, config=LogConfig(index_interval_bytes=64))
    for i in range(3):
        log.append([Record(b"sealed-%d" % i, key=b"k")])
    log.roll()
    for i in range(3):
        log.append([Record(b"active-%d" % i, key=b"k")])
    fsio.write = _stalling_write
    log.append([Record(b"x" * BIG, key=b"k")])
    return 1  # never reached: the append above never returns


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
