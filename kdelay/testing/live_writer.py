"""A writer process for the streaming-source race tests:
`python -m kdelay.testing.live_writer DIR SECONDS SEED [compact]`.

Appends to the log at DIR (wall clock, small segments so it rolls often) for SECONDS,
batches of 1..20 records a few ms apart. Most batches are due at once (deliverAfter is the
append time, chosen inside the append: the case a lock-free reader can race), the others
a little later or with a deliverAfter in the past (clamped to the append time). Closes the
log cleanly and prints `done LOG_END_OFFSET`.

With `compact`, it also races compaction against the reader: now and then it cancels a
record not yet due (so the sealed segment holding it has something removable) and
compacts every COMPACT_EVERY_S, rewriting those segments (compaction_min_ratio 0.01) while
their other records come due and are read. It prints `compacted SEGMENTS_REWRITTEN` just
before `done`.
"""

from __future__ import annotations

import random
import sys
import time

from ..config import LogConfig
from ..partition import Log
from ..records import Record

CONFIG = LogConfig(segment_bytes=32 * 1024, index_interval_bytes=512)
COMPACTING = LogConfig(segment_bytes=4 * 1024, index_interval_bytes=512,
                       compaction_min_ratio=0.01)
COMPACT_EVERY_S = 0.05


def main(argv: list[str]) -> int:
    path, seconds, seed = argv[0], float(argv[1]), int(argv[2])
    compacting = argv[3:] == ["compact"]
    # compacting: some records far enough off that their segment is sealed (and may be
    # rewritten) before they come due
    delays = (20, 150, 400, 1000, 1500) if compacting else (20, 150, 400)
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    pending: list[tuple[int, int]] = []  # (deliverAfter, offset) of records due later
    rewritten = 0
    next_compaction = time.monotonic()
    with Log.open(path, config=COMPACTING if compacting else CONFIG) as log:
        print(f"open {log.log_end_offset}", flush=True)
        while time.monotonic() < end:
            n = rng.randint(1, 20)
            choice = rng.random()
            if choice < 0.6:
                da = None  # due at the append time
            elif choice < 0.8:
                da = log.now() + rng.choice(delays)
            else:
                da = log.now() - 500  # in the past: clamped to the append time
            r = log.append([Record(b"v%d" % rng.getrandbits(32), key=b"k") for _ in range(n)],
                           deliver_after=da)
            if compacting:
                _cancel_now_and_then(log, rng, r, pending)
                if time.monotonic() >= next_compaction:
                    rewritten += log.compact().segments_rewritten
                    next_compaction = time.monotonic() + COMPACT_EVERY_S
            time.sleep(rng.random() * 0.004)
        end_offset = log.log_end_offset
    if compacting:
        print(f"compacted {rewritten}", flush=True)
    print(f"done {end_offset}", flush=True)
    return 0


def _cancel_now_and_then(log: Log, rng: random.Random, appended, pending: list) -> None:
    """Note the records of `appended` due more than 100 ms from now; now and then cancel
    one noted earlier that is still that far off (its segment likely sealed by now)."""
    now = log.now()
    if appended.deliver_after > now + 100:
        pending.extend((appended.deliver_after, o)
                       for o in range(appended.base_offset, appended.last_offset + 1))
    pending[:] = [p for p in pending if p[0] > now + 100]
    if pending and rng.random() < 0.3:
        log.cancel(pending.pop(rng.randrange(len(pending)))[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
