"""The `.cancelled` object's format (kdelay/log/tiered/cancelled_object.py): what the copier
encodes decodes back, and damage is refused, named."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdelay.errors import CorruptLogError
from kdelay.log.tiered.cancelled_object import decode_cancelled, encode_cancelled

BASE, END = 1000, 1000 + (1 << 40)


@given(st.lists(st.integers(BASE, END - 1), max_size=50))
def test_encode_then_decode_gives_the_offsets_sorted_and_unique(offsets):
    data = encode_cancelled(offsets)
    assert np.frombuffer(data, "<u8").tolist() == sorted(set(offsets))  # the stored layout
    assert decode_cancelled(data, BASE, END, "obj").tolist() == sorted(set(offsets))


@pytest.mark.parametrize("data", [
    encode_cancelled([BASE, BASE + 1])[:-1],                          # torn: 15 bytes
    encode_cancelled([BASE + 2]) + encode_cancelled([BASE + 1]),      # not sorted
    encode_cancelled([BASE + 1]) * 2,                                 # repeated
    encode_cancelled([BASE - 1, BASE]),                               # below the segment
    encode_cancelled([END]),                                          # at its end
    b"\xff" * 8,                                                     # past any int64
], ids=["torn", "unsorted", "repeated", "below", "at-end", "huge"])
def test_damage_is_refused_naming_the_object(data):
    with pytest.raises(CorruptLogError) as e:
        decode_cancelled(data, BASE, END, "store/p-0/x.cancelled")
    assert e.value.path == "store/p-0/x.cancelled"


def test_no_offsets_is_empty():
    assert decode_cancelled(encode_cancelled([]), BASE, END, "obj").tolist() == []
