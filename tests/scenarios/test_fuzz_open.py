"""Fuzzing the readers of on-disk state: index loaders on mutated index files, and
Log.open on mutated partition directories (bit flips, truncations, zeroed ranges, junk,
deleted, swapped and stray files, compaction's `.cleaned`/`.swap` files and markers among
them, on a cleanly closed, a crashed and a compacted directory). Only KdelayError subclasses may escape (the internal
IndexFileError never escapes Log.open), nothing hangs, and no read or fetch returns a
record whose bytes differ from what was written."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdelay import KdelayError, Log, LogConfig, Record
from kdelay.errors import IndexFileError
from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.index.offset_index import OffsetIndex
from kdelay.index.time_index import TimeIndex
from kdelay.log.segments.layout import segment_name
from kdelay.testing.faults import close_abandoned

T0 = 1_700_000_000_000
FAR = T0 + 10 ** 9
CFG = LogConfig(segment_bytes=700, index_interval_bytes=100, flush_messages=1)
GUARD_SECONDS = 20


class Hang(BaseException):
    pass


@contextlib.contextmanager
def hang_guard(seconds: float = GUARD_SECONDS):
    """Fail (instead of waiting forever) when the body runs longer than `seconds`."""
    def on_alarm(signum, frame):
        raise Hang(f"no answer within {seconds} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _build(path: str, clean: bool) -> dict[int, tuple[bytes | None, bytes, int]]:
    """A log of several segments; returns offset -> (key, value, deliver_after)."""
    sent = {}
    log = Log.open(path, config=CFG, clock=lambda: T0)
    for i in range(24):
        n = 1 + i % 3
        da = T0 + (i * 37 % 7) * 1000
        recs = [Record(b"val-%d-%d" % (i, k) * (1 + k), key=b"key%d" % k if k else None)
                for k in range(n)]
        res = log.append(recs, deliver_after=da)
        for k, r in enumerate(recs):
            sent[res.base_offset + k] = (r.key, r.value, res.deliver_after)
    log.commit("grp", log.fetch(max_records=3).next)
    assert len(log.segments) >= 4
    if clean:
        log.close()
    else:
        close_abandoned(log)
    return sent


def _build_compacted(path: str) -> dict[int, tuple[bytes | None, bytes, int]]:
    """A cleanly closed log whose sealed segments compaction rewrote: merged segments,
    offset gaps, batches split where records were cancelled, `.compacted` markers."""
    clock = [T0]
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=100, flush_messages=1,
                    retention_ms=1000)
    sent = {}
    log = Log.open(path, config=cfg, clock=lambda: clock[0])
    for i in range(30):
        n = 1 + i % 4
        da = T0 + 10 ** 8 if i % 3 == 0 else T0 + (i % 5) * 100
        recs = [Record(b"cval-%d-%d" % (i, k) * (1 + k), key=b"key%d" % k if k else None)
                for k in range(n)]
        res = log.append(recs, deliver_after=da)
        for k, r in enumerate(recs):
            sent[res.base_offset + k] = (r.key, r.value, res.deliver_after)
    log._maintenance.cancelled = lambda lo, hi: [o for o in range(lo, hi) if o % 7 == 3]
    clock[0] = T0 + 10_000
    assert log.compact().segments_rewritten >= 2
    kept = {r.offset for r in log.read(0, max_records=10_000)}
    log.close()
    # what the oracle expects back: the survivors (a removed record must never reappear)
    assert {o for o, v in sent.items() if v[2] > clock[0] and o % 7 != 3} <= kept
    return {o: sent[o] for o in kept}


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    out = {}
    for clean in (True, False, "compacted"):
        path = str(tmp_path_factory.mktemp("tpl") / "p")
        sent = _build_compacted(path) if clean == "compacted" else _build(path, clean)
        files = {}
        for dirpath, _, names in os.walk(path):
            for name in names:
                if name == ".lock":
                    continue
                full = os.path.join(dirpath, name)
                with open(full, "rb") as f:
                    files[os.path.relpath(full, path)] = f.read()
        out[clean] = (sent, files)
    return out


@pytest.fixture(autouse=True)
def _fast_fsync(monkeypatch):
    # durability is not under test here; recovery's fsyncs would dominate the run time
    monkeypatch.setattr(os, "fsync", lambda fd: None)


# ---------------------------------------------------------------------- mutations

N = st.integers(0, 1 << 20)
MUTATION = st.one_of(
    st.tuples(st.just("flip"), N, N, st.integers(0, 7)),
    st.tuples(st.just("truncate"), N, N),
    st.tuples(st.just("zero"), N, N, st.integers(1, 300)),
    st.tuples(st.just("junk"), N, N, st.binary(min_size=1, max_size=80)),
    st.tuples(st.just("append"), N, st.binary(min_size=1, max_size=200)),
    st.tuples(st.just("delete"), N),
    st.tuples(st.just("swap"), N, N),
    st.tuples(st.just("stray"), st.sampled_from(
        ["00000000000000000003.log", "00000000000000000999.log", "00000000000000000000.index",
         "99999999999999999999.dlyindex", "recovery-point-offset-checkpoint",
         ".kdelay_cleanshutdown", "00000000000000000000.log.tmp",
         "00000000000000000000.log.swap", "00000000000000000000.log.cleaned",
         "00000000000000000000.compacted", "00000000000000000000.compacted.swap",
         "00000000000000000000.dlyindex.swap", "00000000000000000003.index.cleaned"]),
        st.binary(max_size=200)),
)


def mutate(files: dict[str, bytes], mutations) -> dict[str, bytes]:
    files = dict(files)
    for m in mutations:
        names = sorted(files)
        if not names and m[0] != "stray":
            continue
        kind = m[0]
        if kind == "stray":
            files[m[1]] = m[2]
            continue
        name = names[m[1] % len(names)]
        data = bytearray(files[name])
        if kind == "flip" and data:
            data[m[2] % len(data)] ^= 1 << m[3]
        elif kind == "truncate":
            del data[m[2] % (len(data) + 1):]
        elif kind == "zero" and data:
            i = m[2] % len(data)
            data[i:i + m[3]] = bytes(len(data[i:i + m[3]]))
        elif kind == "junk" and data:
            i = m[2] % len(data)
            data[i:i + len(m[3])] = m[3]
        elif kind == "append":
            data += m[2]
        elif kind == "delete":
            del files[name]
            continue
        elif kind == "swap":
            other = names[m[2] % len(names)]
            files[name], files[other] = files[other], files[name]
            continue
        files[name] = bytes(data)
    return files


def materialise(path: str, files: dict[str, bytes]) -> None:
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    for rel, data in files.items():
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)


# ---------------------------------------------------------------------- index loaders

@pytest.mark.parametrize("cls,suffix", [(DeliverAfterIndex, ".dlyindex"),
                                        (OffsetIndex, ".index"), (TimeIndex, ".timeindex")])
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(st.one_of(
    st.tuples(st.just("flip"), st.just(0), N, st.integers(0, 7)),
    st.tuples(st.just("truncate"), st.just(0), N),
    st.tuples(st.just("zero"), st.just(0), N, st.integers(1, 64)),
    st.tuples(st.just("junk"), st.just(0), N, st.binary(min_size=1, max_size=32)),
    st.tuples(st.just("append"), st.just(0), st.binary(min_size=1, max_size=64))),
    min_size=1, max_size=3), stale=st.booleans())
def test_index_loader_rejects_every_damage(templates, tmp_path_factory, cls, suffix,
                                           mutations, stale) -> None:
    """Any change to a persisted index file, or a .log size it was not built for, makes the
    loader raise IndexFileError (the caller rebuilds) and nothing else; an undamaged file
    loads to exactly the persisted entries."""
    _, files = templates[True]
    base = 0
    name = segment_name(base) + suffix
    log_bytes = len(files[segment_name(base) + ".log"])
    original = files[name]
    damaged = mutate({name: original}, [(m[0], 0, *m[2:]) for m in mutations])[name]
    path = str(tmp_path_factory.mktemp("idx") / name)
    with open(path, "wb") as f:
        f.write(damaged)
    with hang_guard():
        try:
            idx = cls.load(path, base_offset=base, log_bytes=log_bytes + stale)
        except IndexFileError:
            return
    assert damaged == original and not stale, "damaged or stale index accepted"
    clean_path = path + ".orig"
    with open(clean_path, "wb") as f:
        f.write(original)
    ref = cls.load(clean_path, base_offset=base, log_bytes=log_bytes)
    assert all((a == b).all() for a, b in zip(idx.columns(), ref.columns(), strict=True))


# ---------------------------------------------------------------------- Log.open

def _check_no_wrong_record(log: Log, sent) -> int:
    """Read everything by offset and by fetch; every record returned must be what was
    written at that offset. A KdelayError (e.g. CorruptLogError on damaged bytes the open
    did not have to read) is an allowed answer; a wrong record is not."""
    seen = 0
    def same(r):
        exp = sent.get(r.offset)
        assert exp is not None, f"record {r.offset} invented"
        assert (r.key, r.value) == exp[:2], f"record {r.offset} altered: {r} vs {exp}"
        # a deliverAfter that recovery read from a (CRC-checked) batch is the written one
        assert r.deliver_after == exp[2], f"record {r.offset} deliverAfter altered"
    with contextlib.suppress(KdelayError):
        offset = log.log_start_offset
        for _ in range(1000):
            page = log.read(offset, max_records=50)
            if not page:
                break
            for r in page:
                same(r)
            seen += len(page)
            assert page[-1].offset >= offset
            offset = page[-1].offset + 1
    with contextlib.suppress(KdelayError):
        cursor = None
        for _ in range(1000):
            res = log.fetch(cursor, max_records=9)
            if not res.records:
                break
            for r in res.records:
                same(r)
            assert cursor is None or res.next > cursor, "fetch did not advance"
            cursor = res.next
    return seen


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 200)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(MUTATION, min_size=1, max_size=4),
       clean=st.sampled_from([True, False, "compacted"]))
def test_open_mutated_directory(templates, tmp_path_factory, mutations, clean) -> None:
    sent, files = templates[clean]
    path = str(tmp_path_factory.mktemp("fz") / "p")
    materialise(path, mutate(files, mutations))
    with hang_guard():
        try:
            log = Log.open(path, config=CFG, clock=lambda: FAR)
        except KdelayError:
            return  # refusing a damaged directory, with a KdelayError, is allowed
        try:
            _check_no_wrong_record(log, sent)
            with contextlib.suppress(KdelayError):
                log.committed("grp")
            # the log takes appends, and what it takes reads back
            try:
                res = log.append([Record(b"after-fuzz")])
            except KdelayError:
                res = None
            if res is not None:
                back = log.read(res.base_offset, max_records=1)
                assert [r.value for r in back] == [b"after-fuzz"]
        finally:
            log.close()
        # and a second open of whatever the first left behind is as well-behaved
        try:
            log = Log.open(path, config=CFG, clock=lambda: FAR)
        except KdelayError:
            return
        try:
            sent2 = dict(sent)
            if res is not None:
                sent2[res.base_offset] = (None, b"after-fuzz", res.deliver_after)
            _check_no_wrong_record(log, sent2)
        finally:
            log.close()


def test_unmutated_templates_read_back_whole(templates, tmp_path) -> None:
    """The oracle itself: without damage every written record comes back."""
    for clean, (sent, files) in templates.items():
        path = str(tmp_path / f"t{clean}")
        materialise(path, files)
        with Log.open(path, config=CFG, clock=lambda: FAR) as log:
            assert _check_no_wrong_record(log, sent) == len(sent)


def test_append_after_damaged_tail_of_last_segment_is_not_lost(tmp_path) -> None:
    """Regression: junk after the last batch of the active segment, found on a clean open
    (stale index), used to be kept; the next append landed after it, so read() could not
    reach the new record (CorruptLogError) and the next crash recovery cut it off: an
    acknowledged, fsync'd record lost."""
    path = str(tmp_path / "p")
    cfg = LogConfig(flush_messages=1)
    with Log.open(path, config=cfg, clock=lambda: T0) as log:
        for i in range(5):
            log.append([Record(b"v%d" % i)])
    with open(os.path.join(path, segment_name(0) + ".log"), "ab") as f:
        f.write(b"\x01" * 100)
    log = Log.open(path, config=cfg, clock=lambda: T0)
    res = log.append([Record(b"acked")])
    assert [r.value for r in log.read(0, max_records=100)] == \
        [b"v0", b"v1", b"v2", b"v3", b"v4", b"acked"]
    close_abandoned(log)  # crash after the acknowledged append
    with Log.open(path, config=cfg, clock=lambda: T0) as log:
        back = log.read(res.base_offset, max_records=1)
        assert [r.value for r in back] == [b"acked"]


def test_damaged_base_offset_in_compacted_segment_is_not_a_gap(templates, tmp_path) -> None:
    """Sweep: a batch's base offset is not covered by its CRC, and a compacted segment
    allows forward offset gaps; a flipped bit in any byte of any batch's base offset must
    still never make a read or fetch return a record under a wrong offset, whether the
    segment's indexes are there to check it against or must be rebuilt from the .log."""
    import struct
    sent, files = templates["compacted"]
    markers = [n for n in files if n.endswith(".compacted")]
    assert markers
    cases = []
    for marker in markers:
        name = marker.replace(".compacted", ".log")
        data, pos = files[name], 0
        while pos + 12 <= len(data):
            # (byte, bit) of the big-endian base offset: off by one, two, 256, 2**24, negative
            cases += [(name, pos + i, bit, lose) for i, bit in ((7, 0), (7, 1), (6, 0),
                                                                (4, 0), (0, 7))
                      for lose in (False, True)]
            pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    assert len(cases) >= 100
    for name, at, bit, lose_indexes in cases:
        damaged = dict(files)
        data = bytearray(files[name])
        data[at] ^= 1 << bit
        damaged[name] = bytes(data)
        if lose_indexes:
            for suffix in (".index", ".timeindex", ".dlyindex"):
                del damaged[name.replace(".log", suffix)]
        path = str(tmp_path / "p")
        materialise(path, damaged)
        with hang_guard():
            try:
                log = Log.open(path, config=CFG, clock=lambda: FAR)
            except KdelayError:
                continue
            try:
                _check_no_wrong_record(log, sent)
            finally:
                log.close()
