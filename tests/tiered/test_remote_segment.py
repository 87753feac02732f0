"""RemoteSegment against the LogSegment it is a copy of: the same indexes, batches,
headers and offset lookups, with its bytes fetched once and damage named."""

from __future__ import annotations

import os

import pytest

from kdelay import Log, LogConfig, Record
from kdelay.errors import CorruptLogError, RemoteStorageError
from kdelay.index.entry import Entry
from kdelay.log.segments.layout import DLYINDEX_SUFFIX, LOG_SUFFIX
from kdelay.log.tiered.copier import copy_segment
from kdelay.log.tiered.remote_segment import RemoteSegment
from kdelay.log.tiered.tier import RemoteTier


@pytest.fixture
def copied(tmp_path, remote, clock):
    """(a sealed LogSegment, a RemoteSegment of its copy, the tier it reads through)."""
    cfg = remote.config(segment_bytes=8192, index_interval_bytes=256)
    # the log itself without remote storage: no background sync copies beside the test
    log = Log.open(os.fspath(tmp_path / "p-0"),
                   config=LogConfig(segment_bytes=8192, index_interval_bytes=256), clock=clock)
    for i in range(80):
        log.append([Record(b"v%03d" % i + b"x" * 60, key=b"k%d" % i)] * (1 + i % 3),
                   delay_ms=(i * 37) % 500)
    seg = next(iter(log._segments))
    copy = copy_segment(RemoteTier(log.path, cfg), seg, [])
    tier = RemoteTier(log.path, cfg)
    yield seg, RemoteSegment(log.path, copy, tier), tier
    log.close()


def test_remote_segment_reads_what_the_local_one_holds(copied):
    seg, rseg, tier = copied
    assert (rseg.base_offset, rseg.next_offset, rseg.size) == (seg.base_offset,
                                                                seg.next_offset, seg.size)
    assert rseg.max_key == seg.dly_index.max_key()
    assert tier.counters.requests == 0  # the manifest alone says all that
    for a, b in zip(rseg.dly_index.columns(), seg.dly_index.columns(), strict=True):
        assert a.tolist() == b.tolist()
    assert list(rseg.batch_headers()) == list(seg.batch_headers())
    for entry in map(Entry._make, zip(*(c.tolist() for c in seg.dly_index.columns()), strict=True)):
        assert rseg.read_verified(entry) == seg.read_verified(entry)
    for offset in range(seg.base_offset - 1, seg.next_offset + 1):
        assert rseg.find_batch(offset) == seg.find_batch(offset)
    assert tier.counters.bytes_fetched <= seg.size + sum(
        size for suffix, (size, _) in rseg.remote.objects.items() if suffix != LOG_SUFFIX)


def test_ensured_window_maps_like_the_local_log(copied):
    seg, rseg, tier = copied
    cols = rseg.dly_index.columns()
    rseg.ensure_entries(cols, 0, len(cols[0]))
    requests = tier.counters.requests
    rseg.ensure_entries(cols, 0, len(cols[0]))
    assert tier.counters.requests == requests  # cached: no second fetch
    assert rseg.read_verified(Entry._make(int(c[0]) for c in cols))[1] == seg.read_verified(
        Entry._make(int(c[0]) for c in cols))[1]


def test_eviction_drops_the_cache_and_reads_fetch_again(copied):
    seg, rseg, tier = copied
    entry = Entry._make(int(c[-1]) for c in seg.dly_index.columns())
    rseg.read_verified(entry)
    assert tier.cache_budget.held > 0
    rseg.evict()
    assert tier.cache_budget.held == 0
    fetched = tier.counters.bytes_fetched
    assert rseg.read_verified(entry) == seg.read_verified(entry)
    assert tier.counters.bytes_fetched > fetched


def _replace_object(tier, rseg, suffix, change):
    name = rseg.remote.object_name(suffix)
    tier.store.put(name, change(tier.store.get(name)))


def test_a_flipped_byte_in_a_batch_is_named_with_the_object(copied):
    seg, rseg, tier = copied
    entry = Entry._make(int(c[0]) for c in seg.dly_index.columns())
    pos = entry[2] + entry[4] - 3
    _replace_object(tier, rseg, LOG_SUFFIX,
                    lambda b: b[:pos] + bytes([b[pos] ^ 0xFF]) + b[pos + 1:])
    with pytest.raises(CorruptLogError) as e:
        rseg.read_verified(entry)
    assert rseg.log_path in str(e.value) and rseg.remote.copy_id in rseg.log_path


def test_a_truncated_log_object_is_named(copied):
    seg, rseg, tier = copied
    _replace_object(tier, rseg, LOG_SUFFIX, lambda b: b[:len(b) // 2])
    last = max(map(Entry._make, zip(*(c.tolist() for c in seg.dly_index.columns()), strict=True)),
               key=lambda e: e[2])
    with pytest.raises((CorruptLogError, RemoteStorageError)) as e:
        rseg.read_verified(last)
    assert rseg.remote.object_name(LOG_SUFFIX) in str(e.value)


@pytest.mark.parametrize("change", [lambda b: b[:-5], lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:]])
def test_a_damaged_index_object_is_named(copied, change):
    seg, rseg, tier = copied
    _replace_object(tier, rseg, DLYINDEX_SUFFIX, change)
    with pytest.raises(CorruptLogError) as e:
        rseg.dly_index  # noqa: B018 - the lazy fetch
    assert rseg.remote.object_name(DLYINDEX_SUFFIX) in str(e.value)


def test_a_missing_object_raises_remote_storage_error_naming_it(copied):
    seg, rseg, tier = copied
    tier.store.delete(rseg.remote.object_name(LOG_SUFFIX))
    with pytest.raises(RemoteStorageError) as e:
        rseg.read_verified(Entry._make(int(c[0]) for c in seg.dly_index.columns()))
    assert rseg.remote.object_name(LOG_SUFFIX) in str(e.value)
    assert tier.last_error is not None

