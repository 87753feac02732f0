"""log/segments/layout.py: segment file names, the directory inventory (segments, leftovers) and
finding partition directories, on real directories written by Log."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdelay import Log, LogConfig, Record
from kdelay.log.segments import layout


@given(st.integers(0, (1 << 63) - 1), st.sampled_from([layout.LOG_SUFFIX, *layout.INDEX_SUFFIXES]))
def test_segment_names_round_trip(base, suffix):
    name = layout.segment_name(base)
    assert len(name) == 20 and name.isdigit()
    assert layout.parse_segment_name(name + suffix) == (base, suffix)
    path = layout.segment_file("/d", base, suffix)
    assert path == os.path.join("/d", name + suffix)
    assert layout.parse_segment_name(os.path.basename(path)) == (base, suffix)


@pytest.mark.parametrize("name", ["42.log", "0000000000000000004x.log", ".lock", "00000000000000000042",
                                  "recovery-point-offset-checkpoint", "000000000000000000042.log"])
def test_not_segment_names(name):
    assert layout.parse_segment_name(name) is None


def _log(path: str, batches: int = 30) -> list[int]:
    with Log.open(path, config=LogConfig(segment_bytes=600), clock=lambda: 1_000) as log:
        for i in range(batches):
            log.append([Record(b"v%03d" % i * 10)])
        return list(log.segments)


def test_inventory_lists_segments_and_leftovers(tmp_path):
    d = str(tmp_path / "p-0")
    bases = _log(d)
    assert len(bases) > 2
    assert layout.segment_bases(d) == bases
    assert layout.leftover_files(d) == []
    listed = layout.list_segments(d)
    assert [s.base_offset for s in listed] == bases
    assert all(s.log_size == os.path.getsize(s.log_path) > 0 for s in listed)
    # leftovers: an interrupted atomic write, an interrupted delete, indexes whose .log went
    gone = bases[1]
    os.unlink(layout.segment_file(d, gone, layout.LOG_SUFFIX))
    for name in ("x.index.tmp", layout.segment_name(7) + ".log.deleted"):
        open(os.path.join(d, name), "wb").close()
    open(os.path.join(d, "unrelated.txt"), "wb").close()
    expect_bases = [b for b in bases if b != gone]
    orphans = [layout.segment_name(gone) + s for s in layout.INDEX_SUFFIXES
               if os.path.exists(layout.segment_file(d, gone, s))]
    assert orphans  # the closed log had persisted indexes for the sealed segment
    listing = layout.classify_directory(d)
    bases_now, leftovers = listing.local, listing.leftovers
    assert bases_now == expect_bases
    assert leftovers == sorted(orphans + ["x.index.tmp", layout.segment_name(7) + ".log.deleted"])
    assert "unrelated.txt" not in leftovers and ".lock" not in leftovers
    # the loader removes exactly these on the next open, and keeps the segments
    with Log.open(d, config=LogConfig(segment_bytes=600)) as log:
        assert list(log.segments)[:1] == expect_bases[:1]
    assert layout.leftover_files(d) == []
    assert os.path.exists(os.path.join(d, "unrelated.txt"))


def test_list_segments_raises_on_missing_dir(tmp_path):
    with pytest.raises(OSError):
        layout.list_segments(str(tmp_path / "nope"))


def test_find_partitions(tmp_path):
    root = str(tmp_path)
    for p in ("orders-0", "orders-1", "orders-10", "other-2"):
        _log(os.path.join(root, p), batches=2)
    os.mkdir(os.path.join(root, "misc"))          # not a partition: no files, no Kafka name
    os.mkdir(os.path.join(root, "t-3"))           # Kafka name, nothing in it yet
    _log(os.path.join(root, "plain"), batches=1)  # a log directory without a Kafka name
    open(os.path.join(root, "notes-1"), "w").close()  # a file, not a directory
    under_root, parts = layout.find_partitions(root)
    assert under_root
    got = {(os.path.basename(p.path), p.topic, p.partition) for p in parts}
    assert got == {("orders-0", "orders", 0), ("orders-1", "orders", 1),
                   ("orders-10", "orders", 10), ("other-2", "other", 2), ("t-3", "t", 3),
                   ("plain", None, None)}
    assert [os.path.basename(p.path) for p in parts] == sorted(os.path.basename(p.path)
                                                              for p in parts)
    assert layout.is_partition_dir(os.path.join(root, "plain"))
    assert not layout.is_partition_dir(os.path.join(root, "t-3"))
    # a partition directory is found as itself
    one = os.path.join(root, "orders-1")
    assert layout.find_partitions(one) == (False, [layout.PartitionDir(one)])
    assert layout.parse_partition_name("my.topic_x-12") == ("my.topic_x", 12)
    assert layout.parse_partition_name("nodash") is None
    with pytest.raises(OSError):
        layout.find_partitions(str(tmp_path / "missing"))
