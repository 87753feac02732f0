"""A writer process for kill -9 soak tests: `python -m kdelay.testing.soak_writer DIR SEED`.

Opens (and so recovers) the log at DIR, then appends forever with flush_messages=1, rolling
now and then, printing `ack LAST_OFFSET` after each acknowledged (hence fsync'd) append.
Every record's value is a pure function of its offset (`expected_value`) and its key holds
the deliverAfter it asked for, so a checker needs nothing from this process but the acks.
"""

from __future__ import annotations

import hashlib
import random
import sys

from ..config import LogConfig
from ..partition import Log
from ..records import Record

CONFIG = LogConfig(segment_bytes=48 * 1024, index_interval_bytes=512, flush_messages=1)


def expected_value(offset: int) -> bytes:
    digest = hashlib.blake2b(offset.to_bytes(8, "big"), digest_size=16).digest()
    return b"%d:" % offset + digest * (1 + offset % 7)


def main(argv: list[str]) -> int:
    path, seed = argv[0], int(argv[1])
    rng = random.Random(seed)
    log = Log.open(path, config=CONFIG)
    out = sys.stdout
    out.write(f"open {log.log_end_offset}\n")
    out.flush()
    while True:
        base = log.log_end_offset
        n = rng.randint(1, 30)
        requested = log.now() + rng.choice((-1000, 0, 50, 300))
        key = b"%d" % requested
        log.append([Record(expected_value(base + i), key=key) for i in range(n)],
                   deliver_after=requested)
        out.write(f"ack {base + n - 1}\n")
        out.flush()
        if rng.random() < 0.02:
            log.roll()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
