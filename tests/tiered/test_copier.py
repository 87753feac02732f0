"""The copy protocol (kdelay/log/tiered/copier.py) against file:// and moto's S3: upload,
verify, commit with a conditional create, adoption of an earlier commit, orphan sweep."""

from __future__ import annotations

import dataclasses
import os
import pathlib

import crc32c
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdelay import Log, LogConfig, Record, RemoteStorageError
from kdelay.log.segments.layout import (
    DLYINDEX_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    REMOTE_SUFFIX,
    TIMEINDEX_SUFFIX,
    segment_file,
)
from kdelay.log.tiered import manifest
from kdelay.log.tiered.cancelled_object import CANCELLED_SUFFIX
from kdelay.log.tiered.copier import copy_segment, file_crc, sweep_orphans
from kdelay.log.tiered.tier import RemoteTier
from kdelay.remote import store as store_module


@pytest.fixture
def sealed(tmp_path, remote, clock):
    """A log with three sealed segments and an active one, and a RemoteTier for it (the
    log itself has no remote storage: no background sync copies behind the test)."""
    cfg = remote.config(segment_bytes=2048, index_interval_bytes=128)
    log = Log.open(os.fspath(tmp_path / "p-0"),
                   config=LogConfig(segment_bytes=2048, index_interval_bytes=128), clock=clock)
    for i in range(60):
        log.append([Record(b"v%03d" % i + b"x" * 100, key=b"k%d" % i)], delay_ms=i * 10)
    assert len(log.segments) >= 4
    yield log, RemoteTier(log.path, cfg)
    log.close()


def _sealed_segments(log):
    return [s for s in log._segments if s is not log._segments.active]


def test_copy_uploads_verified_objects_and_commits(sealed):
    log, tier = sealed
    seg = _sealed_segments(log)[0]
    copy = copy_segment(tier, seg, [])
    assert (copy.base_offset, copy.next_offset, copy.size) == (seg.base_offset,
                                                               seg.next_offset, seg.size)
    assert copy.max_key == seg.dly_index.max_key()
    assert copy.min_deliver_after == seg.dly_index.min_deliver_after()
    listing = tier.store.list()
    assert manifest.manifest_name(seg.base_offset) in listing
    assert set(copy.objects) == {LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, DLYINDEX_SUFFIX}
    for suffix, (size, crc) in copy.objects.items():
        data = tier.store.get(copy.object_name(suffix))
        local = pathlib.Path(segment_file(log.path, seg.base_offset, suffix)).read_bytes()
        assert data == local  # the indexes as persisted on roll, byte for byte
        assert (len(data), crc32c.crc32c(data)) == (size, crc)
    committed = manifest.decode(tier.store.get(manifest.manifest_name(seg.base_offset)), "m")
    assert committed == copy
    marker = pathlib.Path(segment_file(log.path, seg.base_offset, REMOTE_SUFFIX)).read_bytes()
    assert manifest.decode(marker, "local") == copy
    assert tier.counters.bytes_put >= seg.size


def test_cancelled_offsets_go_with_the_copy(sealed):
    log, tier = sealed
    seg = _sealed_segments(log)[1]
    wanted = [seg.next_offset - 1, seg.base_offset]
    copy = copy_segment(tier, seg, wanted)
    data = tier.store.get(copy.object_name(CANCELLED_SUFFIX))
    assert np.frombuffer(data, "<u8").tolist() == sorted(wanted)


def test_an_earlier_commit_of_the_same_segment_is_adopted(sealed):
    log, tier = sealed
    seg = _sealed_segments(log)[0]
    first = copy_segment(tier, seg, [])
    os.unlink(segment_file(log.path, seg.base_offset, REMOTE_SUFFIX))  # crashed before it
    again = copy_segment(tier, seg, [])
    assert again == first
    names = set(tier.store.list())
    assert names == {manifest.manifest_name(seg.base_offset)} | {
        first.object_name(s) for s in first.objects}  # the second attempt's objects went
    assert os.path.exists(segment_file(log.path, seg.base_offset, REMOTE_SUFFIX))


def test_a_manifest_of_another_segment_is_refused(sealed):
    log, tier = sealed
    seg = _sealed_segments(log)[0]
    other = copy_segment(tier, seg, [])
    forged = dataclasses.replace(other, next_offset=other.next_offset + 1)
    tier.store.delete(manifest.manifest_name(seg.base_offset))
    tier.store.put(manifest.manifest_name(seg.base_offset), manifest.encode(forged))
    with pytest.raises(RemoteStorageError, match="another segment"):
        copy_segment(tier, seg, [])


def test_a_copy_that_reads_back_wrong_is_not_committed(sealed, monkeypatch):
    log, tier = sealed
    seg = _sealed_segments(log)[0]
    real_put = store_module.STORE_OPS["put"]

    def damaging_put(store, name, data, create):
        if name.endswith(DLYINDEX_SUFFIX):
            data = bytes(data[:-1]) + bytes([data[-1] ^ 1])
        return real_put(store, name, data, create)

    monkeypatch.setitem(store_module.STORE_OPS, "put", damaging_put)
    with pytest.raises(RemoteStorageError, match="CRC-32C"):
        copy_segment(tier, seg, [])
    assert tier.store.list() == {}  # nothing committed, the attempt's objects removed
    assert not os.path.exists(segment_file(log.path, seg.base_offset, REMOTE_SUFFIX))


def test_sweep_removes_what_no_manifest_names(sealed):
    log, tier = sealed
    first, second = _sealed_segments(log)[:2]
    kept = copy_segment(tier, first, [])
    # an interrupted copy of `second` and a stale attempt at `first`: no manifest names them
    tier.store.put(f"{second.base_offset:020d}.00000000000000aa.log", b"partial")
    tier.store.put(f"{first.base_offset:020d}.00000000000000bb.index", b"stale")
    tier.store.put("not-kdelay.txt", b"left alone")
    # a committed copy the directory does not know of (another writer's): read, and kept
    other = copy_segment(tier, second, [])
    os.unlink(segment_file(log.path, second.base_offset, REMOTE_SUFFIX))
    deleted = sweep_orphans(tier.store, tier.store.list(), {first.base_offset: kept.copy_id})
    assert deleted == 2
    assert set(tier.store.list()) == (
        {manifest.manifest_name(b) for b in (first.base_offset, second.base_offset)}
        | {kept.object_name(s) for s in kept.objects}
        | {other.object_name(s) for s in other.objects} | {"not-kdelay.txt"})


@given(st.binary(max_size=5000))
def test_file_crc_is_the_crc_of_the_whole_file(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("crc") / "f"
    path.write_bytes(data)
    assert file_crc(os.fspath(path)) == crc32c.crc32c(data)
