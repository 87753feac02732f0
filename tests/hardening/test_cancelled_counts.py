"""Counts that speak of what will be delivered leave cancelled records out (issue 31, point
12): a consumer group's lag in `log.metrics()` and `topic.metrics()`, `kdelay stats`'
due-not-consumed per group and its delivery forecast. The oracle is the engine itself: the
lag at a key is how many records `fetch` hands out after it; the forecast is what
`log.read` holds minus what was cancelled."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random

from kdelay import Log, LogConfig, Record, Topic
from kdelay.tools.cli import main

T0 = 1_700_000_000_000
MINUTE = 60_000


def fetched_after(log: Log, key) -> int:
    """How many records a reader at `key` gets, over every page."""
    n = 0
    while True:
        page = log.fetch(key, max_records=7)
        if not page.records:
            return n
        n += len(page.records)
        key = page.records[-1].delivery_key


def stats_json(path: str, now: int) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["stats", path, "--json", "--now", str(now)]) == 0
    return json.loads(out.getvalue().splitlines()[0])


def build(path: str, seed: int, clock: list[int]) -> tuple[Log, set[int]]:
    """A log of several segments, records due within seconds and within hours, a third of
    the pending ones cancelled (whole batches among them) and one rescheduled."""
    rng = random.Random(seed)
    log = Log.open(path, config=LogConfig(segment_bytes=700), clock=lambda: clock[0])
    for i in range(70):
        far = rng.random() < 0.3
        due = T0 + (rng.randint(2, 5) * MINUTE * 30 if far else rng.randint(1, 900))
        log.append([Record(b"v%d-%d" % (i, k)) for k in range(rng.randint(1, 4))],
                   deliver_after=due)
    assert len(log.segments) > 3
    cancelled = set(rng.sample(range(log.log_end_offset), log.log_end_offset // 3))
    assert log.cancel(sorted(cancelled)) == len(cancelled)
    moved = next(o for o in range(log.log_end_offset) if o not in cancelled)
    log.reschedule(moved, T0 + 400)  # the original is cancelled, its copy counts
    cancelled.add(moved)
    return log, cancelled


def test_group_lag_leaves_cancelled_records_out(tmp_path) -> None:
    clock = [T0]
    path = os.fspath(tmp_path / "p-0")
    log, _ = build(path, 3, clock)
    clock[0] = T0 + 1000  # the near records are due, the far ones pending
    due = []
    key = None
    while page := log.fetch(key, max_records=50).records:
        due.extend(page)
        key = page[-1].delivery_key
    assert len(due) > 40
    positions = {"start": None, "early": due[5].delivery_key,
                 "late": due[-3].delivery_key, "done": due[-1].delivery_key}
    for g, k in positions.items():
        log.commit(g, k)
    want = {g: fetched_after(log, k) for g, k in positions.items()}
    assert want["start"] == len(due) and want["done"] == 0
    got = {g: m["lag"] for g, m in log.metrics()["groups"].items()}
    assert got == want
    log.close()
    stats = stats_json(path, clock[0])
    assert {g["group"]: g["due_not_consumed"] for g in stats["groups"]} == want


def test_topic_lag_sums_the_partitions_without_cancelled(tmp_path) -> None:
    clock = [T0]
    with Topic.open(tmp_path, "t", partitions=2, config=LogConfig(segment_bytes=700),
                    clock=lambda: clock[0]) as topic:
        for i in range(40):
            topic.send([Record(b"x%d" % i, key=b"k%d" % i)], deliver_after=T0 + 10 + i)
        for log in topic.logs:
            assert log.cancel(range(0, log.log_end_offset, 2)) > 0
            log.commit("g", None)
        clock[0] = T0 + 100
        want = sum(fetched_after(log, None) for log in topic.logs)
        assert want == sum(log.log_end_offset // 2 for log in topic.logs)
        assert topic.metrics()["groups"]["g"]["lag"] == want


def test_stats_forecast_leaves_cancelled_records_out(tmp_path) -> None:
    clock = [T0]
    path = os.fspath(tmp_path / "p-0")
    log, cancelled = build(path, 8, clock)
    now = T0
    records = log.read(0, max_records=100_000)
    log.close()
    will_come = [r.deliver_after for r in records if r.offset not in cancelled]
    stats = stats_json(path, now)
    forecast = stats["forecast"]
    assert forecast["within_1m"] == sum(now < d <= now + MINUTE for d in will_come)
    assert forecast["within_1h"] == sum(now < d <= now + 60 * MINUTE for d in will_come)
    assert forecast["beyond_1d"] == 0
    assert forecast["within_1d"] == sum(now < d for d in will_come)
    # the counts of what the log holds still count them, and say so
    assert stats["cancelled_records"] == len(cancelled)
    assert stats["pending_records"] == sum(r.deliver_after > now for r in records)
