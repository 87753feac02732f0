"""A Kafka client's batch stored as runs (log/batch/client_batch.pyx, Log.append_client_batch):
held to a model over any records (hypothesis): the run boundaries of the spread rule, every
record's bytes, offsets, timestamps and the producer fields kept, each run due at the
latest time its records asked for and no record more than the spread after it; refusals
name the record; and through the log: due-order fetches see every record once, and a crash
at any file operation of the append leaves all of the batch or none of it under kill -9 and
power loss (torn power loss: whole leading runs of an append that never returned), all of
it once the append returned under flush.messages=1."""

from __future__ import annotations

import os

import crc32c
import pytest
from conftest import T0
from conftest import FakeClock as Clock
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from kdelay import InvalidRecordError, Log, LogConfig
from kdelay.errors import CorruptBatchError
from kdelay.log.batch import codec
from kdelay.log.batch.client_batch import ClientBatch, crc32c_combine
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash, close_abandoned
from kdelay.tools.verify import verify_partition


def records_section(records) -> tuple[bytes, int]:
    """(the uncompressed records section of a kafka-python v2 batch, its base timestamp)."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 24)
    for i, (key, value, headers, ts) in enumerate(records):
        b.append(i, timestamp=ts, key=key, value=value, headers=headers)
    data = bytes(b.build())
    return data[61:], int.from_bytes(data[27:35], "big", signed=True)


def decode_all(data: bytes) -> list:
    """(header, records) of each stored batch, CRC checked."""
    out, pos = [], 0
    while pos < len(data):
        h = codec.parse_header(data, pos)
        codec.check_crc(data, pos, h)
        cols = codec.decode_records(data[pos:pos + h.size], h)
        out.append((h, cols))
        pos += h.size
    return out


ask = st.one_of(st.none(), st.tuples(st.just("kdelay.delay_ms"), st.integers(0, 20_000)),
                st.tuples(st.just("kdelay.deliver_after"), st.integers(T0 - 5000, T0 + 20_000)))
record = st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                   st.one_of(st.none(), st.binary(max_size=300)),
                   st.lists(st.tuples(st.sampled_from(["a", "kdelay.x", "h"]),
                                      st.one_of(st.none(), st.binary(max_size=10))),
                            max_size=2),
                   st.integers(T0 - 10_000, T0 + 10_000), ask)


def asked_time(a, now: int) -> int:
    if a is None:
        return now
    name, v = a
    t = now + v if name == "kdelay.delay_ms" else v
    return max(t, now)


@given(st.lists(record, min_size=1, max_size=40), st.integers(0, 5000), st.booleans(),
       st.integers(0, 1000), st.integers(-1, 3))
def test_runs_match_the_model(recs, spread, append_time, base, seq):
    now = T0
    specs = [(k, v, h + ([(a[0], str(a[1]).encode())] if a else []), ts)
             for k, v, h, ts, a in recs]
    section, base_ts = records_section(specs)
    batch = ClientBatch(section, len(specs), base_ts)
    pid, epoch = (-1, -1) if seq < 0 else (99, 2)
    data, entries = batch.build(base, now, spread, log_append_time=append_time,
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    # the model: greedy runs, a record joining while the run's span stays within spread
    asked = [asked_time(r[4], now) for r in recs]
    runs, lo, hi = [[0]], asked[0], asked[0]
    for i in range(1, len(recs)):
        if max(hi, asked[i]) - min(lo, asked[i]) <= spread:
            runs[-1].append(i)
            lo, hi = min(lo, asked[i]), max(hi, asked[i])
        else:
            runs.append([i])
            lo = hi = asked[i]
    stored = decode_all(data)
    assert [[h.base_offset + j for j in range(h.record_count)] for h, _ in stored] == \
        [[base + i for i in run] for run in runs]
    assert len(entries) == len(stored)
    for (h, cols), run, entry in zip(stored, runs, entries, strict=True):
        assert h.deliver_after == max(asked[i] for i in run)
        assert all(asked[i] <= h.deliver_after <= asked[i] + spread for i in run)
        assert (h.producer_id, h.producer_epoch) == (pid, epoch)
        assert h.base_sequence == (-1 if seq < 0 else seq + run[0])
        assert list(cols.keys) == [specs[i][0] for i in run]
        assert list(cols.values) == [specs[i][1] for i in run]
        assert [list(x) for x in cols.headers] == [specs[i][2] for i in run]
        want_ts = [now if append_time else specs[i][3] for i in run]
        assert list(cols.timestamps) == want_ts and h.max_timestamp == max(want_ts)
        assert bool(h.attributes & 0x08) == append_time
        assert list(entry) == [h.deliver_after, h.base_offset, entry[2], h.last_offset_delta,
                               h.size, h.max_timestamp]


@given(st.lists(record, min_size=1, max_size=40), st.integers(0, 5000), st.booleans(),
       st.integers(0, 1000), st.integers(-1, 3), st.binary(max_size=9), st.binary(max_size=9))
def test_a_known_records_crc_stores_the_same_bytes(recs, spread, append_time, base, seq,
                                                   before, after):
    """Given the records' CRC (the client check's, wire_batch.py), build derives the stored
    batch's CRC from it where the batch is the records as sent; split, such a batch is its
    header and a view of the records where they lie (written together, uncopied). Either
    way the bytes are identical to building without both, whatever the runs, and for
    records read where they lie in larger bytes."""
    specs = [(k, v, h + ([(a[0], str(a[1]).encode())] if a else []), ts)
             for k, v, h, ts, a in recs]
    section, base_ts = records_section(specs)
    framed = before + section + after
    pid, epoch = (-1, -1) if seq < 0 else (99, 2)
    built = []
    for records_crc, split in ((-1, False), (crc32c.crc32c(section), False), (-1, True),
                               (crc32c.crc32c(section), True)):
        out = ClientBatch(framed, len(specs), base_ts, start=len(before),
                          end=len(before) + len(section), records_crc=records_crc).build(
                              base, T0, spread, log_append_time=append_time, producer_id=pid,
                              producer_epoch=epoch, base_sequence=seq, split=split)
        if split:
            data, entries, body = out
            one_run = len(entries) == 1 and not append_time
            assert (body is not None) == one_run
            if one_run:
                assert len(data) == codec.HEADER_SIZE and bytes(body) == section
                data += bytes(body)
            out = (data, entries)
        built.append(out)
    for data, entries in built[1:]:
        assert data == built[0][0]
        assert (entries == built[0][1]).all()
    decode_all(built[0][0])  # every stored CRC checks


@given(st.binary(max_size=300), st.binary(max_size=5000))
def test_crc32c_combine_is_the_crc_of_both(a, b):
    assert crc32c_combine(crc32c.crc32c(a), crc32c.crc32c(b), len(b)) == crc32c.crc32c(a + b)


@pytest.mark.parametrize("headers, words", [
    ([("kdelay.delay_ms", b"")], "decimal"),
    ([("kdelay.delay_ms", b"+5")], "decimal"),
    ([("kdelay.deliver_after", b"1" * 19)], "decimal"),
    ([("kdelay.delay_ms", b"1"), ("kdelay.delay_ms", b"2")], "more than one"),
])
def test_bad_headers_name_the_record(headers, words):
    section, base_ts = records_section([(None, b"a", [], T0), (None, b"b", headers, T0)])
    with pytest.raises(InvalidRecordError, match=f"record 1: .*{words}"):
        ClientBatch(section, 2, base_ts)


def test_malformed_records_are_corrupt():
    section, base_ts = records_section([(None, b"a", [("h", b"v")], T0)])
    for bad in (section[:-1], section + b"\0", section[:3]):
        with pytest.raises(CorruptBatchError):
            ClientBatch(bad, 1, base_ts)
    with pytest.raises(CorruptBatchError):
        ClientBatch(section, 2, base_ts)  # fewer records than the header says


def mixed_batch(delays: tuple[int, ...] = (0, 5000, 5000, 0, 2000, 0)) -> ClientBatch:
    specs = [(b"k", b"v%d" % i, [("kdelay.delay_ms", str(d).encode())] if d else [], T0)
             for i, d in enumerate(delays)]
    section, base_ts = records_section(specs)
    return ClientBatch(section, len(specs), base_ts)


# a batch of several runs (one buffer written), and of one (its header and its records
# as they lie, written together: ClientBatch.build's split, SegmentTail.append_many's body)
BATCH_DELAYS = {"runs": (0, 5000, 5000, 0, 2000, 0), "one run": (0, 0, 0, 0, 0, 0)}


def test_appended_runs_come_due_in_order(tmp_path):
    clock = Clock()
    with Log.open(tmp_path / "p", clock=clock, config=LogConfig(index_interval_bytes=1)) as log:
        log.append_client_batch(mixed_batch())
        r = log.append_client_batch(mixed_batch(), producer=(5, 0, 6))
        assert (r.base_offset, r.last_offset, r.deliver_after) == (6, 11, T0)
        first = log.fetch()
        assert [x.offset for x in first.records] == [0, 3, 5, 6, 9, 11]
        clock.advance(5000)
        rest = log.fetch(first.next)
        assert [x.offset for x in rest.records] == [4, 10, 1, 2, 7, 8]
        assert [x.value for x in log.read(6)] == [b"v%d" % i for i in range(6)]


@pytest.fixture
def _no_real_fsync(monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.mark.usefixtures("_no_real_fsync")
@pytest.mark.parametrize("mode", CRASH_MODES)
@pytest.mark.parametrize("kind", sorted(BATCH_DELAYS))
def test_a_crash_at_any_operation_leaves_all_or_nothing(tmp_path, mode, kind):
    cfg = LogConfig(flush_messages=1, segment_bytes=400, index_interval_bytes=1)
    point = 0
    while True:
        path = str(tmp_path / f"{mode}-{point}")
        with Log.open(path, config=cfg, clock=Clock()) as log:
            log.append_client_batch(mixed_batch(BATCH_DELAYS[kind]))  # acknowledged
        inj = FaultInjector([path], crash_at=point)
        log = Log.open(path, config=cfg, clock=Clock())
        returned = False
        with inj:
            try:
                log.append_client_batch(mixed_batch(BATCH_DELAYS[kind]))  # rolls first
                returned = True
            except SimulatedCrash:
                pass
        close_abandoned(log)
        inj.apply_crash(mode)
        with Log.open(path, config=cfg, clock=Clock()) as again:
            values = [r.value for r in again.read(0, max_records=100)]
        assert values[:6] == [b"v%d" % i for i in range(6)]
        # a torn page cache may keep whole leading runs of an append that never returned
        # (each run is a batch with its own CRC): recovery drops them (codec.MORE_RUNS)
        assert values[6:] in ([], values[:6]), (point, values)
        if returned:
            assert values[6:] == values[:6]
        if not inj.crashed:
            break
        point += 1
    assert point >= 3  # the append wrote, fsynced and rolled through the injector


def test_a_client_batch_without_its_last_run_is_cut_off_and_verify_says_so(tmp_path):
    """The runs of a client batch cut at a run boundary (what a torn write can leave, every
    run whole with its CRC): `kdelay verify` reports it as information, and the next open
    keeps none of that client batch."""
    path = str(tmp_path / "p")
    with Log.open(path, clock=Clock()) as log:
        log.append_client_batch(mixed_batch())
        log.append_client_batch(mixed_batch())  # runs: [0], [1, 2], [3], [4], [5]
    seg = os.path.join(path, "00000000000000000000.log")
    with open(seg, "rb") as f:
        data = f.read()
    pos, starts = 0, []
    while pos < len(data):
        starts.append(pos)
        pos += codec.parse_header(data, pos).size
    with open(seg, "r+b") as f:
        f.truncate(starts[-1])  # the second client batch without its last run
    os.unlink(os.path.join(path, ".kdelay_cleanshutdown"))
    rep = verify_partition(path)
    assert not rep.problems
    assert any("lacks its last run" in f.message for f in rep.findings)
    with Log.open(path, clock=Clock()) as log:
        assert [r.value for r in log.read(0, max_records=100)] == \
            [b"v%d" % i for i in range(6)]
        assert any("lacks its last run" in p for p in log.load_report.problems)
