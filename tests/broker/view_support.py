"""Helpers of the due-order view's tests: a log of several segments with records due out
of order, served batches decoded by kafka-python (an oracle nobody here wrote), and a
view's numbering as a dict."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatch

from kdelay import Log, LogConfig, Record

T0 = 1_700_000_000_000  # a fixed epoch-ms start for fake clocks


class FakeClock:
    """A settable ms clock (the broker tests' own: tests/broker may get a conftest of its
    own, which `from conftest import` would then find instead of the top one)."""

    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t

    def advance(self, ms: int) -> int:
        self.t += ms
        return self.t


def segmented_log(path: str, config: LogConfig, clock: FakeClock, cancelled: list[int]
                  ) -> Log:
    """Three sealed segments and an active one, 3 batches of 3 records each, due over
    0..900 ms after T0 out of offset order, the offsets `cancelled` cancelled; flushed
    (the crashes of the tests using it are the view's, not the log's appends). Open."""
    log = Log.open(path, config=config, clock=clock)
    for seg in range(4):
        for i in range(3):
            log.append([Record(b"%d-%d-%d" % (seg, i, j)) for j in range(3)],
                       deliver_after=T0 + ((seg * 7 + i * 5) % 10) * 100)
        if seg < 3:
            log.roll()
    log.cancel(cancelled)
    log.flush()
    return log


def decode_served(data: bytes | bytearray) -> list[tuple[int, int, object, object, list, int]]:
    """(batch base offset, offset, key, value, headers, timestamp) of every record of the
    served v2 batches, each CRC checked, in wire order."""
    data = bytes(data)
    out = []
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
        batch = DefaultRecordBatch(data[pos:pos + size])
        assert batch.validate_crc(), "a served batch fails its CRC"
        assert data[pos + 16] == 2, "a served batch is not magic 2"
        for r in batch:
            out.append((batch.base_offset, r.offset, r.key, r.value, list(r.headers),
                        r.timestamp))
        pos += size
    return out


def numbering(view) -> dict[int, int]:
    """log offset -> delivery offset of every record the view's entries number."""
    rows = view._rows[:view._n]
    out = {}
    for base, first, count in zip(rows["base"].tolist(), rows["first"].tolist(),
                                  rows["count"].tolist(), strict=True):
        for t in range(count):
            out[first + t] = base + t
    return out
