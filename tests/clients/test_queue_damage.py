"""Damage to a queue group's state files: what a crash can leave (a torn journal tail) is
repaired and reported; anything else (a damaged snapshot, journal header, or a damaged byte
that a later entry says was already on disk) stops the group from opening, names the file
and byte, and leaves both files untouched, so no ack is silently lost."""

from __future__ import annotations

import os
import random
import struct

import pytest
from conftest import T0, FakeClock

from kdelay import KdelayError, Log, QueueConsumer, Record
from kdelay.groups.queue import state_format, state_store
from kdelay.groups.queue.state_store import JOURNAL_HEADER_SIZE, CorruptQueueStateError


@pytest.fixture(autouse=True)
def _no_real_fsync(monkeypatch):
    """Damage, not durability, is the subject here: skip the real fsyncs (~2 ms each)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def _build(path: str) -> tuple[set[int], set[int]]:
    """A group with a snapshot (after compaction) and a journal of several calls; returns
    (finished offsets, unfinished offsets)."""
    clock = FakeClock(T0)
    with Log.open(path, clock=clock) as log:
        for i in range(40):
            log.append([Record(b"v%d" % i)])
        q = QueueConsumer(log, "g", compact_min_bytes=600)
        finished = set()
        while recs := q.poll(max_records=3):
            q.ack(recs[:1])
            finished.add(recs[0].offset)
            q.release(recs[1:2], delay_ms=10**9)  # out of the way for the rest of the run
        assert q._parts[0].store.generation >= 1
        assert q._parts[0].store.journal_bytes > 200
        q.close()
    return finished, set(range(40)) - finished


def _files(path: str) -> tuple[str, str]:
    return state_store.paths(path, "g")


def _entries(journal: bytes) -> list[tuple[int, int, int]]:
    """(start, end, synced claim) of each valid entry."""
    out, pos = [], JOURNAL_HEADER_SIZE
    while (e := state_format.entry_at(journal, pos)) is not None:
        end = pos + 8 + 9 + len(e[2])
        out.append((pos, end, e[1]))
        pos = end
    return out


def _flip(path: str, pos: int, rng: random.Random) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ (1 << rng.randrange(8))]))


def _snapshot_of(path: str) -> dict[str, bytes]:
    out = {}
    for p in _files(path):
        with open(p, "rb") as f:
            out[p] = f.read()
    return out


def _drain(path: str) -> set[int]:
    with Log.open(path, clock=FakeClock(T0 + 10**10)) as log:
        q = QueueConsumer(log, "g")
        got = {r.offset for r in q.poll(max_records=1000)}
        q.close()
        return got


def test_intact_state_round_trips(tmp_path):
    path = str(tmp_path / "p")
    finished, rest = _build(path)
    assert _drain(path) == rest


@pytest.mark.parametrize("seed", range(8))
def test_damaged_snapshot_is_refused_and_left_alone(tmp_path, seed):
    path = str(tmp_path / "p")
    _build(path)
    snap, _ = _files(path)
    rng = random.Random(seed)
    _flip(snap, rng.randrange(os.path.getsize(snap)), rng)
    before = _snapshot_of(path)
    with Log.open(path) as log, pytest.raises(CorruptQueueStateError) as exc:
        QueueConsumer(log, "g")
    assert snap in str(exc.value)
    assert _snapshot_of(path) == before


@pytest.mark.parametrize("seed", range(6))
def test_damage_in_the_synced_journal_is_refused(tmp_path, seed):
    path = str(tmp_path / "p")
    _build(path)
    _, journal = _files(path)
    with open(journal, "rb") as f:
        data = f.read()
    vouched = max(s for _, _, s in _entries(data))
    assert vouched > JOURNAL_HEADER_SIZE + 50
    rng = random.Random(seed)
    pos = rng.randrange(0, vouched)  # header included
    _flip(journal, pos, rng)
    before = _snapshot_of(path)
    with Log.open(path) as log, pytest.raises(KdelayError) as exc:
        QueueConsumer(log, "g")
    assert isinstance(exc.value, CorruptQueueStateError) and journal in str(exc.value)
    assert _snapshot_of(path) == before


@pytest.mark.parametrize("cut", [1, 5, 13, 30])
def test_torn_tail_is_dropped_and_reported(tmp_path, cut, caplog):
    path = str(tmp_path / "p")
    clock = FakeClock(T0)
    with Log.open(path, clock=clock) as log:
        for i in range(6):
            log.append([Record(b"v%d" % i)])
        q = QueueConsumer(log, "g")
        q.ack(q.poll(max_records=2))
        q.poll(max_records=2)   # an acquisition entry, not fsync'd
        q.close()
    _, journal = _files(path)
    size = os.path.getsize(journal)
    with open(journal, "r+b") as f:
        f.truncate(size - cut)
    with caplog.at_level("WARNING", logger="kdelay"):
        got = _drain(path)
    assert got == {2, 3, 4, 5}  # the acks held; the torn acquisition only loses its count
    assert "torn journal tail" in caplog.text


def test_garbage_after_the_journal_is_a_torn_tail(tmp_path):
    path = str(tmp_path / "p")
    finished, rest = _build(path)
    _, journal = _files(path)
    with open(journal, "ab") as f:
        f.write(os.urandom(100))
    assert _drain(path) == rest


def test_journal_without_snapshot_or_newer_than_it(tmp_path):
    path = str(tmp_path / "p")
    _build(path)
    snap, journal = _files(path)
    with open(snap, "rb") as f:
        saved = f.read()
    os.unlink(snap)
    with Log.open(path) as log, pytest.raises(CorruptQueueStateError, match="without"):
        QueueConsumer(log, "g")
    # an older snapshot (generation 0) beside the newer journal
    with open(snap, "wb") as f:
        f.write(state_store.encode_snapshot(0, None, 0, 0, []))
    with Log.open(path) as log, pytest.raises(CorruptQueueStateError, match="newer"):
        QueueConsumer(log, "g")
    with open(snap, "wb") as f:
        f.write(saved)
    assert _drain(path)  # and the real one still works


def test_stale_journal_after_interrupted_compaction_is_ignored(tmp_path):
    """Compaction wrote snapshot g+1 and died before replacing the journal of g."""
    path = str(tmp_path / "p")
    finished, rest = _build(path)
    snap, journal = _files(path)
    st = state_store.load(path, "g")
    items = [(o, c, a) for o, (c, a) in st.inflight.items()]
    with open(snap, "wb") as f:
        f.write(state_store.encode_snapshot(st.generation + 1, st.cursor, st.acked,
                                            st.rejected, items))
    assert _drain(path) == rest


@pytest.mark.parametrize("seed", range(20))
def test_random_journal_damage_never_loses_a_vouched_ack(tmp_path, seed, caplog):
    """One flipped byte anywhere in the journal: below the last vouched length, open
    refuses; past it (the last fsync'd write, indistinguishable from a torn one), the group
    opens with a warning and every ack recorded before the damaged entry holds."""
    path = str(tmp_path / "p")
    _build(path)
    _, journal = _files(path)
    with open(journal, "rb") as f:
        data = f.read()
    entries = _entries(data)
    vouched = max(s for _, _, s in entries)
    rng = random.Random(seed)
    pos = rng.randrange(JOURNAL_HEADER_SIZE, len(data))
    _flip(journal, pos, rng)
    if pos < vouched:
        with Log.open(path) as log, pytest.raises(CorruptQueueStateError):
            QueueConsumer(log, "g")
        return
    kept_acks = set()
    for start, end, _ in entries:
        e = state_format.entry_at(data, start)
        if end <= pos and e[0] == state_store.ACK:
            kept_acks |= set(struct.unpack_from(f">{len(e[2]) // 8}q", e[2], 4))
    with caplog.at_level("WARNING", logger="kdelay"):
        got = _drain(path)
    assert "torn journal tail" in caplog.text
    assert not got & kept_acks


def test_log_losing_an_unflushed_tail_the_group_had_seen(tmp_path):
    """flush_messages=None and a power loss: the log loses records the group (fsync'd)
    already acked or held. The group forgets them, and new records at those offsets are
    delivered as new ones."""
    from kdelay import LogConfig
    from kdelay.testing.faults import close_abandoned
    path = str(tmp_path / "p")
    clock = FakeClock(T0)
    log = Log.open(path, config=LogConfig(), clock=clock)
    for i in range(10):
        log.append([Record(b"v%d" % i)])
    log.flush()
    seg = os.path.join(path, f"{log.segments[-1]:020d}.log")
    durable = os.path.getsize(seg)
    for i in range(10, 15):
        log.append([Record(b"v%d" % i)])
    q = QueueConsumer(log, "g")
    recs = q.poll()
    q.ack([r for r in recs if r.offset >= 10 or r.offset < 3])
    assert state_store.verify_group(path, "g", 10)[0][3].startswith("the group has seen")
    for part in q._parts:
        part.store.close()
    close_abandoned(log)
    with open(seg, "r+b") as f:  # what the power loss left of the log
        f.truncate(durable)
    log = Log.open(path, config=LogConfig(), clock=clock)
    assert log.log_end_offset == 10
    q = QueueConsumer(log, "g")
    assert [(r.offset, r.delivery_count) for r in q.poll()] == [(o, 2) for o in range(3, 10)]
    for i in range(3):
        log.append([Record(b"new%d" % i)])
    assert [(r.offset, r.value) for r in q.poll()] == [(10 + i, b"new%d" % i) for i in range(3)]
    q.close()
    log.close()


def test_disk_full_during_ack_changes_nothing(tmp_path):
    """ENOSPC on the journal write: the ack raises LogWriteError, the records stay held,
    the journal is cut back, and the same ack succeeds once there is room."""
    from kdelay import LogWriteError
    from kdelay.testing.faults import FaultInjector
    path = str(tmp_path / "p")
    with Log.open(path, clock=FakeClock(T0)) as log:
        for i in range(4):
            log.append([Record(b"v%d" % i)])
        q = QueueConsumer(log, "g")
        recs = q.poll()
        _, journal = _files(path)
        size = os.path.getsize(journal)
        full = FaultInjector([path], enospc=lambda op, p: op == "write" and p == journal)
        with full, pytest.raises(LogWriteError):
            q.ack(recs[:2])
        assert os.path.getsize(journal) == size
        q.release(recs[:2])  # still held by q: a release works, then an ack of the others
        q.ack(recs[2:])
        q.close()
    assert _drain(path) == {0, 1}


def test_failed_fsync_fails_the_group_until_it_reopens(tmp_path):
    from kdelay import LogWriteError
    from kdelay.testing.faults import FaultInjector
    path = str(tmp_path / "p")
    with Log.open(path, clock=FakeClock(T0)) as log:
        for i in range(3):
            log.append([Record(b"v%d" % i)])
        q = QueueConsumer(log, "g")
        recs = q.poll()
        _, journal = _files(path)
        eio = FaultInjector([path], enospc=lambda op, p: op == "fsync" and p == journal)
        with eio, pytest.raises(LogWriteError):
            q.ack(recs[:1])
        with pytest.raises(LogWriteError, match="reopen"):
            q.ack(recs[1:])
        with pytest.raises(LogWriteError):
            q.poll()
        q.close()
        q = QueueConsumer(log, "g")  # a fresh group state from the files
        got = q.poll()
        assert {r.offset for r in got} in ({1, 2}, {0, 1, 2})  # the failed ack: either way
        q.ack(got)
        q.close()
