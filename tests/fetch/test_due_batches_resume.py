"""The due batches' remembered merges (fetch/due_batches.py): a reader that goes on from
the cursor a read returned resumes the merge that read left, and must hand out exactly
what a reader that starts afresh from that cursor does, through appends, cancellations,
rolls (a segment every few batches), retention deleting the oldest segments, segments
replaced (the reset) and a second reader on a cursor of its own."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import DeliveryKey, Log, LogConfig, Record
from kdelay.fetch.due_batches import DueBatchReader

T0 = 1_000_000
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 6), st.integers(-20, 400)),
        st.tuples(st.just("tick"), st.integers(0, 150), st.just(0)),
        st.tuples(st.just("read"), st.integers(1, 6), st.integers(50, 2000)),
        st.tuples(st.just("other"), st.integers(1, 6), st.integers(50, 2000)),
        st.tuples(st.just("cancel"), st.integers(0, 10 ** 6), st.integers(1, 3)),
        st.tuples(st.just("roll"), st.just(0), st.just(0)),
        st.tuples(st.just("retention"), st.just(0), st.just(0)),
        st.tuples(st.just("replaced"), st.just(0), st.just(0)),
    ),
    min_size=1, max_size=120)


def _read_both(log: Log, cursor: DeliveryKey | None, max_batches: int, max_bytes: int):
    """(what the log's own reader, resuming, hands out; what a new reader does)."""
    resumed, nxt, now = log.reads.due(cursor, max_batches=max_batches, max_bytes=max_bytes,
                                      with_bytes=True)
    with log._lock:
        fresh, fresh_next = DueBatchReader().read(log._segments, cursor, now, max_batches,
                                                  max_bytes, log._cancels, True)
    assert nxt == fresh_next
    return resumed, fresh, nxt


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_a_resumed_read_equals_a_fresh_one(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("due-batches")
    now = [T0]
    # a segment every few batches; retention by size keeps the newest few
    config = LogConfig(segment_bytes=400, retention_bytes=1200)
    cursors: dict[str, DeliveryKey | None] = {"read": None, "other": None}
    offsets: list[int] = []
    log = Log.open(path, config=config, clock=lambda: now[0])
    try:
        for op, a, b in ops:
            if op == "append":
                res = log.append([Record(b"v%d" % i) for i in range(a)],
                                 deliver_after=max(0, now[0] + b))
                offsets += range(res.base_offset, res.last_offset + 1)
            elif op == "tick":
                now[0] += a
            elif op == "roll":
                log.roll()
            elif op == "retention":
                log.enforce_retention()
            elif op == "replaced":
                log.reads.forget_merges()
            elif op == "cancel":
                if offsets:
                    first = offsets[a % len(offsets)]
                    log.cancel(range(first, first + b))
            else:
                resumed, fresh, nxt = _read_both(log, cursors[op], a, b)
                assert resumed == fresh
                cursors[op] = nxt
        now[0] += 1_000
        for name in cursors:  # both readers drain the rest, 3 batches a read
            while True:
                resumed, fresh, nxt = _read_both(log, cursors[name], 3, 1 << 20)
                assert resumed == fresh
                if not resumed:
                    break
                cursors[name] = nxt
    finally:
        log.close()


def test_a_reader_following_its_cursor_resumes(tmp_path):
    """Reads that follow `next` take the remembered merge (the cost the module states:
    no new pending segments, the sealed runs where they stood)."""
    now = [T0]
    log = Log.open(tmp_path, config=LogConfig(segment_bytes=400), clock=lambda: now[0])
    try:
        for i in range(40):
            log.append([Record(b"x" * 20)], deliver_after=T0 + 100 - i)
        now[0] += 1_000
        reader = log.reads._due
        cursor = None
        seen = []
        while True:
            batches, cursor, _ = log.reads.due(cursor, max_batches=3, max_bytes=1 << 20,
                                               with_bytes=False)
            if not batches:
                break
            seen += [b.base_offset for b in batches]
            assert list(reader._points) == [cursor]  # one merge kept, by the next cursor
        assert seen == list(range(39, -1, -1))  # due order: the latest offset asked earliest
    finally:
        log.close()


def test_a_roll_between_reads_hands_the_sealed_segment_over(tmp_path):
    """Records of the active segment left unread when it rolls are read from it sealed,
    by the resumed merge (the roll adds it to the pending segments), as afresh."""
    now = [T0]
    log = Log.open(tmp_path, config=LogConfig(), clock=lambda: now[0])
    try:
        log.roll()
        for i in range(6):  # a sealed segment whose records come due later
            log.append([Record(b"s")], deliver_after=T0 + 500 + i)
        log.roll()
        for i in range(6):
            log.append([Record(b"a")], deliver_after=T0 + 10 + i)
        now[0] += 100
        cursor = None
        for _ in range(2):
            resumed, fresh, cursor = _read_both(log, cursor, 2, 1 << 20)
            assert resumed == fresh
        log.roll()  # the rest of the active segment's records now lie in a sealed one
        log.append([Record(b"b")], deliver_after=T0 + 20)
        now[0] += 1_000
        got = []
        while True:
            resumed, fresh, cursor = _read_both(log, cursor, 2, 1 << 20)
            assert resumed == fresh
            if not resumed:
                break
            got += [b.base_offset for b in resumed]
        assert got == [10, 11, 12, 0, 1, 2, 3, 4, 5]
    finally:
        log.close()
