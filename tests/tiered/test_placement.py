"""Where a log's segments are (kdelay/log/tiered/placement.py), the counts both
`log.metrics()["remote"]` and `kdelay stats` report."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kdelay.log.tiered.manifest import RemoteCopy
from kdelay.log.tiered.placement import placement_counts


def _copy(size: int) -> RemoteCopy:
    return RemoteCopy(base_offset=0, next_offset=1, copy_id="0" * 16, size=size,
                      max_timestamp=-1, min_deliver_after=None, max_key=None, compacted=False)


# each sealed segment: local only, copied and still local, or remote only
_sealed = st.sampled_from(["local", "copied", "remote"])


@given(st.lists(st.tuples(_sealed, st.integers(0, 10_000)), max_size=20),
       st.integers(0, 10_000))
def test_counts_follow_where_each_segment_is(sealed, active_size):
    segments = [(None if where == "remote" else size,
                 None if where == "local" else _copy(size)) for where, size in sealed]
    segments.append((active_size, None))
    got = placement_counts(segments)
    kinds = [where for where, _ in sealed]
    assert got["segments_local"] == kinds.count("local") + kinds.count("copied") + 1
    assert got["segments_remote"] == kinds.count("copied") + kinds.count("remote")
    assert got["bytes_local"] == active_size + sum(s for w, s in sealed if w != "remote")
    assert got["bytes_remote"] == sum(s for w, s in sealed if w != "local")
    assert got["copies_pending"] == kinds.count("local")  # never the active segment


def test_an_empty_list_counts_nothing():
    assert set(placement_counts([]).values()) == {0}
