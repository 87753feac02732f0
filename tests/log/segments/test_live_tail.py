"""kdelay.log.segments.live_tail: the rule that tells an append in flight from damage."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from kdelay import Log, Record
from kdelay.log.batch import codec
from kdelay.log.segments import append_horizon
from kdelay.log.segments.layout import segment_file
from kdelay.log.segments.live_tail import append_in_flight, is_short_batch, lock_held

T0 = 1_700_000_000_000
BATCH = codec.encode_batch(base_offset=5, base_timestamp=T0, deliver_after=T0,
                           keys=[b"k"] * 3, values=[b"v" * 200] * 3)


@given(lead=st.integers(0, 300), cut=st.integers(0, len(BATCH)))
def test_a_prefix_of_a_batch_is_short_and_a_whole_one_is_not(tmp_path_factory, lead: int,
                                                            cut: int) -> None:
    path = str(tmp_path_factory.mktemp("t") / "f.log")
    with open(path, "wb") as f:
        f.write(b"\x00" * lead + BATCH[:cut])
    # bytes walked up to the end of what is there; none at all is no batch
    assert is_short_batch(path, lead, lead + cut) == (0 < cut < len(BATCH))


@given(magic=st.integers(0, 255).filter(lambda b: b != codec.MAGIC),
       length=st.integers(-(1 << 31), codec.MIN_BATCH_LENGTH - 1),
       which=st.sampled_from(["magic", "length", "base"]))
def test_a_garbled_header_is_not_a_short_batch(tmp_path_factory, magic: int, length: int,
                                              which: str) -> None:
    """Only a header that parses can be the start of a batch being written: a bad magic
    byte, an impossible batchLength or a negative base offset is damage."""
    head = bytearray(BATCH[:codec.HEADER_SIZE + 10])
    if which == "magic":
        head[16] = magic
    elif which == "length":
        head[8:12] = length.to_bytes(4, "big", signed=True)
    else:
        head[0:8] = (-1 - length % 1000).to_bytes(8, "big", signed=True)
    path = str(tmp_path_factory.mktemp("t") / "f.log")
    with open(path, "wb") as f:
        f.write(head)
    assert not is_short_batch(path, 0, len(head))
    with open(path, "wb") as f:
        f.write(BATCH[:len(head)])
    assert is_short_batch(path, 0, len(head))


def test_lock_held_follows_the_log(tmp_path) -> None:
    path = str(tmp_path / "p")
    assert not lock_held(path)  # nothing there
    log = Log.open(path)
    assert lock_held(path)
    assert not lock_held(str(tmp_path))  # another directory's lock
    log.close()
    assert os.path.exists(os.path.join(path, ".lock")) and not lock_held(path)


def test_append_in_flight_needs_all_of_its_conditions(tmp_path, monkeypatch) -> None:
    """The last segment, a short batch there, the lock held and the horizon saying an
    append is in progress: take any one away and it is not an append in flight."""
    path = str(tmp_path / "p")
    log = Log.open(path, clock=lambda: T0)
    try:
        log.append([Record(b"a")])
        log.roll()
        log.append([Record(b"b")])
        sealed, active = log.segments
        end = os.path.getsize(segment_file(path, active, ".log"))
        with open(segment_file(path, active, ".log"), "ab") as f:
            f.write(BATCH[:100])  # as a pwrite in progress leaves it
        whole = end + 100
        log._life.horizon.begin(T0)  # the writer's side: an append is in progress
        assert append_in_flight(path, active, end, whole)
        assert not append_in_flight(path, sealed, end, whole)  # not the active segment
        assert not append_in_flight(path, active, end, end + len(BATCH))  # whole: no
        assert not append_in_flight(path, active, end - 1, whole)  # not a batch start
        monkeypatch.setattr("kdelay.log.segments.live_tail.lock_held", lambda d: False)
        assert not append_in_flight(path, active, end, whole)  # nobody holds the lock
        monkeypatch.undo()
        log._life.horizon.end(T0)
        assert append_horizon.read_state(path) == (False, T0)
        assert not append_in_flight(path, active, end, whole)  # idle writer: damage
        log._life.horizon.begin(T0)
    finally:
        log.close()
    assert not append_in_flight(path, active, end, whole)  # closed: no writer
