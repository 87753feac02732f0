"""A remote copy's index objects, fetched and checked against their manifest
(kdelay/log/tiered/index_cache.py `checked_index_object`, `load_copy_index`): the log's
cache and Spark's readers (kdelay/spark/segment_bytes.py) take the same steps."""

from __future__ import annotations

import dataclasses
import os

import pytest

from kdelay import CorruptLogError, Log, LogConfig, Record
from kdelay.index.deliver_after_index import DeliverAfterIndex
from kdelay.log.segments.layout import DLYINDEX_SUFFIX
from kdelay.log.tiered.index_cache import checked_index_object, load_copy_index
from kdelay.log.tiered.remote_marker import read_remote_marker
from kdelay.log.tiered.tier import recorded_store
from kdelay.spark.segment_bytes import RemoteBytes
from kdelay.testing.tiering import tier_out


@pytest.fixture
def copied(tmp_path, file_remote):
    """(the store, the committed copy of the first segment) of a log copied to file://."""
    path = os.fspath(tmp_path / "p-0")
    with Log.open(path, config=LogConfig(segment_bytes=2048)) as log:
        for i in range(60):
            log.append([Record(b"v%03d" % i + b"x" * 60)], delay_ms=5 + i % 7)
    bases = tier_out(path, file_remote.config(segment_bytes=2048), remote_only=0)
    return recorded_store(path), read_remote_marker(path, bases[0])


def _vouched_otherwise(copy, suffix):
    """`copy` with a manifest that records another CRC-32C for object `suffix`."""
    size, crc = copy.objects[suffix]
    return dataclasses.replace(copy, objects={**copy.objects, suffix: (size, crc ^ 1)})


def test_an_index_object_is_checked_against_its_manifest(copied):
    store, copy = copied
    data = checked_index_object(store, copy, DLYINDEX_SUFFIX)
    assert data == store.get(copy.object_name(DLYINDEX_SUFFIX))
    with pytest.raises(CorruptLogError, match="manifest says") as e:
        checked_index_object(store, _vouched_otherwise(copy, DLYINDEX_SUFFIX), DLYINDEX_SUFFIX)
    assert e.value.path == store.describe(copy.object_name(DLYINDEX_SUFFIX))
    without = dataclasses.replace(copy, objects={k: v for k, v in copy.objects.items()
                                                 if k != DLYINDEX_SUFFIX})
    with pytest.raises(CorruptLogError, match="names no"):
        checked_index_object(store, without, DLYINDEX_SUFFIX)


def test_a_loaded_index_must_end_where_the_copy_does(copied, tmp_path):
    store, copy = copied
    path = tmp_path / "i"
    path.write_bytes(checked_index_object(store, copy, DLYINDEX_SUFFIX))
    index = load_copy_index(os.fspath(path), copy, DeliverAfterIndex, "where")
    assert index.meta.next_offset == copy.next_offset
    longer = dataclasses.replace(copy, next_offset=copy.next_offset + 1)
    with pytest.raises(CorruptLogError, match="index ends at offset") as e:
        load_copy_index(os.fspath(path), longer, DeliverAfterIndex, "where")
    assert e.value.path == "where"


def test_spark_reads_an_index_its_manifest_does_not_vouch_for_as_none(copied):
    store, copy = copied
    assert RemoteBytes(store, copy).dly_index() is not None
    assert RemoteBytes(store, _vouched_otherwise(copy, DLYINDEX_SUFFIX)).dly_index() is None
    assert RemoteBytes(store, dataclasses.replace(copy, next_offset=copy.next_offset + 1)
                       ).dly_index() is None
