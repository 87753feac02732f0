"""log/batch/entry_check.py: a batch read back is checked against its index entry, one
batch at a time (check_batch) or a run of them as columns (check_run), with the same
verdicts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdelay import CorruptLogError
from kdelay.log.batch import codec
from kdelay.log.batch.entry_check import CHECKED_FIELDS, check_batch, check_run

T0 = 1_700_000_000_000


def _run(counts: list[int], lead: int = 0) -> tuple[bytearray, list[tuple[int, ...]]]:
    """Batches of `counts` records back to back after `lead` bytes, and their entries."""
    buf = bytearray(b"\x00" * lead)
    entries = []
    base = 100
    for i, n in enumerate(counts):
        b = codec.encode_batch(base_offset=base, base_timestamp=T0, deliver_after=T0 + i % 3,
                               keys=[None] * n, values=[b"v%d" % k for k in range(n)])
        entries.append((T0 + i % 3, base, len(buf), n - 1, len(b)))
        buf += b
        base += n
    return buf, entries


def test_an_intact_batch_passes_and_gives_its_header():
    buf, entries = _run([3, 1])
    h = check_batch(buf, entries[1][2], entries[1], path="x.log")
    assert (h.deliver_after, h.base_offset, h.last_offset_delta, h.size) == \
        tuple(entries[1][i] for i in (0, 1, 3, 4))


ENTRY_FIELDS = ("deliver_after", "base_offset", "position", "last_offset_delta", "size")


def test_the_checked_fields_are_the_entry_s_but_its_position():
    assert tuple(f for f in ENTRY_FIELDS if f != "position") == CHECKED_FIELDS


@pytest.mark.parametrize("field", CHECKED_FIELDS)
def test_each_field_of_the_entry_is_checked(field):
    buf, entries = _run([3, 2])
    entry = list(entries[1])
    entry[ENTRY_FIELDS.index(field)] += 1
    with pytest.raises(CorruptLogError, match=rf"its index entry says .*\(x.log at byte "
                                              rf"{entries[1][2]}\)"):
        check_batch(buf, entries[1][2], tuple(entry), path="x.log")


def test_the_crc_is_checked_unless_the_caller_reports_it():
    buf, entries = _run([2])
    buf[-1] ^= 0x40  # inside the records: only the CRC sees it
    with pytest.raises(CorruptLogError, match="CRC-32C mismatch"):
        check_batch(buf, 0, entries[0], path="x.log")
    assert check_batch(buf, 0, entries[0], path="x.log", crc=False).record_count == 2


def test_a_batch_cut_short_is_truncated():
    buf, entries = _run([4])
    with pytest.raises(CorruptLogError, match="truncated batch"):
        check_batch(bytes(buf[:-3]), 0, entries[0], path="x.log")


def _verdict(buf, entries) -> bool:
    try:
        for e in entries:
            check_batch(buf, e[2], e, path=None)
    except CorruptLogError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=8), st.integers(0, 9),
       st.one_of(st.none(), st.tuples(st.integers(0, 7), st.sampled_from(CHECKED_FIELDS),
                                      st.sampled_from([-1, 1, 1 << 20]))),
       st.one_of(st.none(), st.tuples(st.integers(0, 1 << 16), st.integers(1, 255))))
def test_the_columnar_check_gives_the_verdicts_of_check_batch(counts, lead, wrong, flip):
    buf, entries = _run(counts, lead)
    if wrong is not None:  # one entry says something else of its batch
        i, field, by = wrong
        e = list(entries[i % len(entries)])
        e[ENTRY_FIELDS.index(field)] += by
        entries[i % len(entries)] = tuple(e)
    if flip is not None:  # one byte of the batches damaged
        at, mask = flip
        buf[lead + at % (len(buf) - lead)] ^= mask
    cols = [np.array([e[k] for e in entries], dtype=np.int64) for k in range(5)]
    headers = check_run(bytes(buf), lead, cols[0], cols[1], cols[3], cols[4])
    assert (headers is not None) == _verdict(bytes(buf), entries)
    if headers is not None:
        assert headers.rel.tolist() == cols[2].tolist()
        assert headers.max_timestamp.tolist() == [
            codec.parse_header(buf, e[2]).max_timestamp for e in entries]
