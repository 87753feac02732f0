"""Class 6: time rules.

- Rolling by time compares record timestamps with record timestamps (as Kafka does): a
  replay or backfill of old records rolls when the records' own times span segment_ms,
  never once per batch because they are old.
- max_delivery_delay_ms holds for the delay every record really gets: its batch's
  requested deliverAfter minus its own timestamp, whether the delay was asked for per
  record or per batch (the same batch is accepted or refused either way).
- Consumer.retry's default backoff never asks for more than the log allows (PIP-315's
  trap): it clamps to max_delivery_delay_ms, so the retry path keeps working.
"""

from __future__ import annotations

import itertools
import os

import pytest

from kdelay import Consumer, DeliveryDelayExceededError, Log, LogConfig, Record, Topic

T0 = 1_700_000_000_000
HOUR = 3_600_000
DAY = 24 * HOUR


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    """Nothing crashes here: the real fsync only costs time (a roll per batch is slow)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


class Clock:
    def __init__(self, t: int = T0):
        self.t = t

    def __call__(self) -> int:
        return self.t


# ---------------------------------------------------------------------- rolling


@pytest.mark.parametrize("age_days", [1, 30, 3000])
@pytest.mark.parametrize("span_hours", [0, 3])
def test_backfill_rolls_by_record_time(tmp_path, age_days: int, span_hours: int) -> None:
    """200 batches whose record timestamps start `age_days` ago and advance evenly over
    `span_hours`: with segment_ms of one hour, the log rolls about once per hour of record
    time, not per batch."""
    clock = Clock()
    n = 200
    with Log.open(tmp_path / "p", config=LogConfig(segment_ms=HOUR), clock=clock) as log:
        start = T0 - age_days * DAY
        for i in range(n):
            ts = start + i * span_hours * HOUR // n
            log.append([Record(b"x", timestamp=ts), Record(b"y", timestamp=ts + 1)])
            clock.t += 10  # wall time moves on a little, as it does
        assert len(log.segments) <= span_hours + 2, \
            f"{len(log.segments)} segments for {span_hours} h of record time"


def test_live_appends_still_roll_by_time(tmp_path) -> None:
    """Records stamped by the log (no timestamp) roll when the log clock passes
    segment_ms, as before."""
    clock = Clock()
    with Log.open(tmp_path / "p", config=LogConfig(segment_ms=HOUR), clock=clock) as log:
        for _ in range(10):
            log.append([Record(b"x")])
            clock.t += HOUR // 2
        assert 4 <= len(log.segments) <= 6


# ---------------------------------------------------------------------- the delay limit

LIMIT = 10_000
NOW = T0
TIMESTAMPS = (None, NOW, NOW - 3_000, NOW - 20_000, NOW + 2_000)
RECORD_DAS = (None, NOW + 9_000, NOW + 12_000, NOW - 1_000)


def _batches():
    """Two-record batches: every combination of per-record timestamp and deliver_after."""
    for ts1, ts2, da1, da2 in itertools.product(TIMESTAMPS, TIMESTAMPS, RECORD_DAS,
                                                RECORD_DAS):
        yield [Record(b"a", timestamp=ts1, deliver_after=da1),
               Record(b"b", timestamp=ts2, deliver_after=da2)]


def _allowed(records, explicit) -> bool:
    das = [r.deliver_after for r in records if r.deliver_after is not None]
    requested = explicit if explicit is not None else (max(das) if das else None)
    if requested is None:
        return True
    stamps = [NOW if r.timestamp is None else r.timestamp for r in records]
    return max(requested - t for t in stamps) <= LIMIT


def test_delay_limit_holds_for_every_record(tmp_path) -> None:
    """Every batch, appended with record-level deliver_afters and again with the same
    requested time given explicitly: both accepted or both refused, refused exactly when
    some record would wait longer than the limit after its own timestamp, and no
    accepted record waits longer."""
    clock = Clock(NOW)
    cfg = LogConfig(max_delivery_delay_ms=LIMIT)
    wrong = []
    with Log.open(tmp_path / "p", config=cfg, clock=clock) as log:
        for recs in _batches():
            das = [r.deliver_after for r in recs if r.deliver_after is not None]
            requested = max(das) if das else None
            plain = [r._replace(deliver_after=None) for r in recs]
            for label, args, kw in (("per record", recs, {}),
                                    ("explicit", plain, {"deliver_after": requested})):
                end = log.log_end_offset
                try:
                    res = log.append(args, **kw)
                    accepted = True
                except DeliveryDelayExceededError:
                    accepted = False
                    assert log.log_end_offset == end
                if accepted != _allowed(recs, None):
                    wrong.append(f"{label}: {recs} accepted={accepted}")
                if accepted:
                    for r in log.read(res.base_offset, max_records=2):
                        delay = r.deliver_after - r.timestamp
                        if r.deliver_after != res.append_time and delay > LIMIT:
                            wrong.append(f"{label}: {recs}: record waits {delay} ms")
    assert not wrong, f"{len(wrong)} wrong decisions, e.g.\n" + "\n".join(wrong[:6])


# ---------------------------------------------------------------------- retry backoff


@pytest.mark.parametrize("limit", [5_000, 60_000, 3_000_000])
def test_default_retry_backoff_clamps_to_the_limit(tmp_path, limit: int) -> None:
    """Retry one record 15 times with the default backoff (1 s doubling to an hour): every
    retry is accepted and waits at most the limit."""
    clock = Clock()
    cfg = LogConfig(max_delivery_delay_ms=limit)
    with Log.open(tmp_path / "p", config=cfg, clock=clock) as log:
        log.append([Record(b"job")])
        consumer = Consumer(log, "g")
        for attempt in range(1, 16):
            (rec,) = consumer.poll(max_records=1)
            out = consumer.retry(rec)
            assert out.attempt == attempt
            assert out.result.deliver_after - out.result.append_time <= limit
            consumer.commit()
            clock.t = out.result.deliver_after


def test_default_retry_backoff_clamps_on_a_topic(tmp_path) -> None:
    clock = Clock()
    cfg = LogConfig(max_delivery_delay_ms=4_000)
    with Topic.open(tmp_path, "t", partitions=2, config=cfg, clock=clock) as topic:
        topic.send([Record(b"job", key=b"k")])
        consumer = Consumer(topic, "g")
        for _ in range(6):
            (rec,) = consumer.poll(max_records=1)
            out = consumer.retry(rec)
            assert out.result.deliver_after - out.result.append_time <= 4_000
            clock.t = out.result.deliver_after


def test_default_retry_on_a_fifo_log(tmp_path) -> None:
    """A log without delayed delivery cannot delay a retry: the default retry re-delivers
    at once instead of failing every time."""
    clock = Clock()
    cfg = LogConfig(delayed_delivery_enable=False)
    with Log.open(tmp_path / "p", config=cfg, clock=clock) as log:
        log.append([Record(b"job")])
        consumer = Consumer(log, "g")
        for attempt in range(1, 4):
            (rec,) = consumer.poll(max_records=1)
            assert consumer.retry(rec).attempt == attempt


def test_explicit_retry_delay_over_the_limit_is_refused(tmp_path) -> None:
    """An explicit delay_ms is the caller's wish: over the limit it is refused, clearly."""
    with Log.open(tmp_path / "p", config=LogConfig(max_delivery_delay_ms=1000),
                  clock=Clock()) as log:
        log.append([Record(b"job")])
        consumer = Consumer(log, "g")
        (rec,) = consumer.poll()
        with pytest.raises(DeliveryDelayExceededError):
            consumer.retry(rec, delay_ms=5000)
