"""Idempotent producers' state across restarts, crashes and damage (producer_state.py,
producer_snapshot.py): a producer that wrote many segment rolls before a restart is still
known (its retry answered with the original offsets, a gap refused), whatever the crash
point of the produce path (crash-point injector over appends, rolls and snapshot writes,
each crash mode; a torn write of a multi-run client batch included) or a kill -9 of a real
broker; a damaged snapshot is rebuilt from the log and `kdelay verify` names it; the load
reads one segment, not all of them; producers expire after producer.id.expiration.ms."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest
from kio.schema.errors import ErrorCode
from produce_support import (
    RawClient,
    broker_process,
    partition_answer,
    produce_request,
    stop,
    stored,
    v2_batch,
)
from test_produce_raw import _metadata_all
from view_support import T0, FakeClock

from kdelay import Log, LogConfig
from kdelay.broker import producer_snapshot, producer_state
from kdelay.broker.apis.produce import _Refused, store_client_batch
from kdelay.broker.producer_snapshot import SNAPSHOT_FILE, read_snapshot
from kdelay.broker.producer_state import ProducerStates
from kdelay.broker.wire_batch import open_batches
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash, close_abandoned
from kdelay.tools.verify import verify_partition

CONFIG = LogConfig(segment_bytes=300, flush_messages=1, index_interval_bytes=64)
OLD, NEW = 7001, 7002  # producer ids: one that writes once, long before; one that goes on
LAST = 14  # NEW's last sequence before a restart
OUT_OF_ORDER = ErrorCode.out_of_order_sequence_number.name


def batch(pid: int, seq: int, n: int = 2, runs: bool = False):
    """A checked client batch of `n` records of producer `pid` from sequence `seq`; with
    `runs`, records ask for different delays (stored as several runs)."""
    values = [b"p%d-s%d" % (pid, seq + i) for i in range(n)]
    headers = [[("kdelay.delay_ms", b"%d" % (i * 1000))] if runs else [] for i in range(n)]
    data = v2_batch(values, headers=headers, producer_id=pid, producer_epoch=0,
                    base_sequence=seq)
    (b,) = open_batches(data, max_bytes=1 << 20, delays_allowed=True, max_delay_ms=0)
    return b


def store(states: ProducerStates, log: Log, b) -> int:
    return store_client_batch(states, "t", 0, log, b, 0, False)[0]


def answer(states: ProducerStates, log: Log, b) -> int | str:
    """The base offset answered, or the error's name (an ErrorCode is an int too)."""
    try:
        return store(states, log, b)
    except _Refused as e:
        return e.code.name


def values_once(log: Log) -> Counter:
    out: Counter = Counter()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        got = log.read(offset, max_records=500)
        out.update(r.value for r in got)
        offset = got[-1].offset + 1
    return out


def history(path: str) -> tuple[ProducerStates, Log, dict[int, int]]:
    """OLD writes one batch, then NEW writes enough to roll the segment many times (its
    last batch several runs). Returns the states, the open log, and NEW's base offsets."""
    log = Log.open(path, config=CONFIG, clock=FakeClock(T0))
    states = ProducerStates()
    assert store(states, log, batch(OLD, 0)) == 0
    bases = {seq: store(states, log, batch(NEW, seq, runs=seq % 6 == 4))
             for seq in range(0, LAST + 2, 2)}
    return states, log, bases


def test_a_producer_many_rolls_back_is_known_after_a_restart(tmp_path):
    path = str(tmp_path / "t-0")
    states, log, bases = history(path)
    assert len(log.segments) >= 5
    log.close()
    log = Log.open(path, config=CONFIG, clock=FakeClock(T0 + 60_000))
    try:
        states = ProducerStates()
        end = log.log_end_offset
        assert answer(states, log, batch(OLD, 0)) == 0  # the original offsets, not again
        assert answer(states, log, batch(OLD, 5)) == OUT_OF_ORDER
        assert answer(states, log, batch(NEW, LAST)) == bases[LAST]
        assert log.log_end_offset == end
        assert answer(states, log, batch(OLD, 2)) == end  # what follows is appended
    finally:
        log.close()
    assert not verify_partition(path).problems


def test_the_load_reads_the_segments_after_the_snapshot_only(tmp_path, monkeypatch):
    path = str(tmp_path / "t-0")
    _, log, _ = history(path)
    opened: list[str] = []
    real = producer_state.fsio.open_read
    monkeypatch.setattr(producer_state.fsio, "open_read",
                        lambda p: opened.append(p) or real(p))
    producer_state.load(log, producer_state.DEFAULT_EXPIRATION_MS)
    assert len(opened) == 1  # the active segment, of many
    os.unlink(os.path.join(path, SNAPSHOT_FILE))
    opened.clear()
    rebuilt = producer_state.load(log, producer_state.DEFAULT_EXPIRATION_MS)
    assert len(opened) == len(log.segments) and OLD in rebuilt.producers
    states = ProducerStates()
    store(states, log, batch(NEW, LAST + 2))
    states.close()  # a clean stop: a snapshot at the log end
    opened.clear()
    again = producer_state.load(log, producer_state.DEFAULT_EXPIRATION_MS)
    assert opened == [] and again.snapshot_offset == log.log_end_offset
    assert answer(ProducerStates(), log, batch(NEW, LAST + 2)) == log.log_end_offset - 2
    end = log.log_end_offset
    store(states, log, batch(NEW, LAST + 4))  # after the snapshot, in the same segment
    opened.clear()
    walked = producer_state.load(log, producer_state.DEFAULT_EXPIRATION_MS)
    # (read back, it continues the batch before it: one entry of both)
    assert len(opened) == 1 and walked.producers[NEW].batches[-1] == (LAST + 2, LAST + 5,
                                                                      end - 2)
    log.close()


def test_producers_expire_after_producer_id_expiration_ms(tmp_path):
    clock = FakeClock(T0)
    with Log.open(str(tmp_path / "t-0"), config=CONFIG, clock=clock) as log:
        states = ProducerStates(expiration_ms=10_000)
        store(states, log, batch(OLD, 0))
        clock.advance(9_999)
        assert answer(states, log, batch(OLD, 0)) == 0  # still known: a duplicate
        clock.advance(1)
        for seq in range(0, 20, 2):
            store(states, log, batch(NEW, seq))  # rolls: snapshots written meanwhile
        _, saved = read_snapshot(log.path)
        assert OLD not in saved and NEW in saved
        end = log.log_end_offset
        assert answer(states, log, batch(OLD, 0)) == end  # forgotten: a new producer


@pytest.fixture
def _no_real_fsync(monkeypatch):
    """The injector models durability; the real syscall only costs time."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.mark.usefixtures("_no_real_fsync")
def test_every_crash_point_of_the_produce_path(tmp_path):
    """Before the crash: OLD's batch, then NEW's through many rolls (acknowledged, flushed).
    Under the injector: NEW's next batches, several runs each, through more rolls and
    snapshot writes, crashing before each file operation in turn. After the reboot, with
    the state loaded afresh: OLD and NEW's acknowledged batches are duplicates at their
    original offsets, the batch in flight is retried into the log exactly once, a gap is
    refused, and every record is there once."""
    point = 0
    while True:
        for mode in CRASH_MODES:
            path = str(tmp_path / f"{point}-{mode}" / "t-0")
            states, log, bases = history(path)
            inj = FaultInjector([path], crash_at=point, seed=point)
            sent, acked = [], {}
            with inj:
                try:
                    for seq in (LAST + 2, LAST + 5):
                        sent.append(batch(NEW, seq, n=3, runs=True))
                        acked[seq] = store(states, log, sent[-1])
                except SimulatedCrash:
                    pass
            close_abandoned(log)
            inj.apply_crash(mode)
            with Log.open(path, config=CONFIG, clock=FakeClock(T0 + 1000)) as log:
                states = ProducerStates()
                where = f"op {point} {mode}"
                assert answer(states, log, batch(OLD, 0)) == 0, where
                assert answer(states, log, batch(OLD, 9)) == OUT_OF_ORDER, where
                last = max(acked) if acked else LAST
                want = acked[last] if acked else bases[LAST]
                retry = batch(NEW, last, n=3 if acked else 2, runs=bool(acked))
                assert answer(states, log, retry) == want, where
                if len(acked) < len(sent):  # the batch in flight, sent again
                    base = answer(states, log, sent[len(acked)])
                    assert isinstance(base, int), (where, base)
                counts = values_once(log)
                assert set(counts.values()) == {1}, where
                assert len(counts) == 2 + LAST + 2 + 3 * len(sent), where
            assert not verify_partition(path).problems, where
        if not inj.crashed:
            break
        point += 1
    assert point >= 20  # appends, rolls and snapshot writes went through the injector


def _damage_cases(path: str) -> dict:
    with open(os.path.join(path, SNAPSHOT_FILE), "rb") as f:
        data = f.read()
    offset, producers = producer_snapshot.decode(data)
    flipped = bytearray(data)
    flipped[-3] ^= 0x10
    return {"flipped": bytes(flipped), "truncated": data[:len(data) - 5], "empty": b"",
            "garbage": os.urandom(len(data)),
            "past the end": producer_snapshot.encode(10 ** 9, producers)}


@pytest.mark.parametrize("case", ["flipped", "truncated", "empty", "garbage", "past the end"])
def test_a_damaged_snapshot_is_rebuilt_from_the_log_and_verify_names_it(tmp_path, case):
    path = str(tmp_path / "t-0")
    _, log, bases = history(path)
    log.close()
    damaged = _damage_cases(path)[case]
    with open(os.path.join(path, SNAPSHOT_FILE), "wb") as f:
        f.write(damaged)
    assert any("producer-state snapshot" in p.message for p in verify_partition(path).problems)
    with Log.open(path, config=CONFIG, clock=FakeClock(T0 + 1000)) as log:
        states = ProducerStates()
        end = log.log_end_offset
        assert answer(states, log, batch(OLD, 0)) == 0
        assert answer(states, log, batch(NEW, LAST)) == bases[LAST]
        assert answer(states, log, batch(OLD, 7)) == OUT_OF_ORDER
        assert log.log_end_offset == end
        assert answer(states, log, batch(NEW, LAST + 2)) == end  # a new snapshot follows
    assert not verify_partition(path).problems


def test_verify_names_a_snapshot_that_disagrees_with_the_log(tmp_path):
    path = str(tmp_path / "t-0")
    _, log, _ = history(path)
    log.close()
    offset, producers = read_snapshot(path)
    producers[OLD].batches = [(5, 6, producers[NEW].batches[0][2])]  # NEW's batch, as OLD's
    with open(os.path.join(path, SNAPSHOT_FILE), "wb") as f:
        f.write(producer_snapshot.encode(offset, producers))
    problems = verify_partition(path).problems
    assert any(f"producer {OLD} epoch 0 wrote sequence 5" in p.message for p in problems)


def test_kill_9_while_producing_then_retries(tmp_path):
    """A real broker, segments of 600 bytes: OLD writes once, NEW many batches (rolls,
    snapshots), kill -9 with NEW's next batch in flight. Restarted: OLD's retry and NEW's
    acknowledged last batch answer their original offsets, the one in flight is written
    once, a gap is refused, `kdelay verify` finds nothing wrong."""
    root = str(tmp_path)
    V = 9

    def raw(seq: int, pid: int = NEW, n: int = 2) -> bytes:
        return v2_batch([b"p%d-s%d" % (pid, seq + i) for i in range(n)], producer_id=pid,
                        producer_epoch=0, base_sequence=seq,
                        headers=[[("kdelay.delay_ms", b"%d" % (i * 1000))] for i in range(n)])

    def send(c: RawClient, b: bytes) -> object:
        return partition_answer(c.request(0, V, produce_request(V, "k9", 0, b)))

    with broker_process(root, "segment.bytes=600", "num.partitions=1") as (proc, bootstrap):
        with RawClient(bootstrap) as c:
            c.request(3, 9, _metadata_all())  # creates "k9"
            first = send(c, raw(0, OLD))
            assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
            bases = {}
            for seq in range(0, 40, 2):
                a = send(c, raw(seq))
                assert a.error_code == ErrorCode.none
                bases[seq] = a.base_offset
            c.send(c.frame(0, V, produce_request(V, "k9", 0, raw(40))))  # in flight
        stop(proc, signal.SIGKILL)
    with broker_process(root) as (proc, bootstrap):
        with RawClient(bootstrap) as c:
            old = send(c, raw(0, OLD))
            last = send(c, raw(38))
            flight = send(c, raw(40))
            gap = send(c, raw(50))
        assert (old.error_code, old.base_offset) == (ErrorCode.none, 0)
        assert (last.error_code, last.base_offset) == (ErrorCode.none, bases[38])
        assert flight.error_code == ErrorCode.none
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        assert stop(proc) == 0
    values = Counter(r.value for r in stored(root, "k9"))
    assert set(values.values()) == {1} and len(values) == 2 + 40 + 2
    assert not verify_partition(os.path.join(root, "k9-0")).problems
    assert os.path.exists(os.path.join(root, "k9-0", SNAPSHOT_FILE))
