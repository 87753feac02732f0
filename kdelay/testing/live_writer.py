"""A writer process for the streaming-source race test:
`python -m kdelay.testing.live_writer DIR SECONDS SEED`.

Appends to the log at DIR (wall clock, small segments so it rolls often) for SECONDS,
batches of 1..20 records a few ms apart. Most batches are due at once (deliverAfter is the
append time, chosen inside the append: the case a lock-free reader can race), the others
a little later or with a deliverAfter in the past (clamped to the append time). Closes the
log cleanly and prints `done LOG_END_OFFSET`.
"""

from __future__ import annotations

import random
import sys
import time

from ..config import LogConfig
from ..partition import Log
from ..records import Record

CONFIG = LogConfig(segment_bytes=32 * 1024, index_interval_bytes=512)


def main(argv: list[str]) -> int:
    path, seconds, seed = argv[0], float(argv[1]), int(argv[2])
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    with Log.open(path, config=CONFIG) as log:
        print(f"open {log.log_end_offset}", flush=True)
        while time.monotonic() < end:
            n = rng.randint(1, 20)
            choice = rng.random()
            if choice < 0.6:
                da = None  # due at the append time
            elif choice < 0.8:
                da = log.now() + rng.choice((20, 150, 400))
            else:
                da = log.now() - 500  # in the past: clamped to the append time
            log.append([Record(b"v%d" % rng.getrandbits(32), key=b"k") for _ in range(n)],
                       deliver_after=da)
            time.sleep(rng.random() * 0.004)
        end_offset = log.log_end_offset
    print(f"done {end_offset}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
