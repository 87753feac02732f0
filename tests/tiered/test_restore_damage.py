"""Damage met by a restore. A damaged manifest or `.cancelled` object stops the adoption
there: an empty directory is refused with CorruptLogError naming the object (a log
opened below the damaged copy would reuse its offsets), a directory that adopted the
newer copies opens from the damaged one's end with the problem in its load report. A
missing object a manifest names is found by the first read that needs it. Every object
read on a restore is checked against its manifest's size and CRC-32C."""

from __future__ import annotations

import os
import shutil

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdelay import CorruptLogError, Log, Record, RemoteStorageError
from kdelay.log.segments.layout import LOG_SUFFIX, REMOTE_SUFFIX
from kdelay.log.tiered import manifest
from kdelay.log.tiered.copier import CANCELLED_SUFFIX
from kdelay.remote.store import RemoteStore
from kdelay.testing.checks import read_everything
from kdelay.testing.tiering import tiered_history

CONFIG = dict(segment_bytes=1024, index_interval_bytes=128)


@pytest.fixture
def lost(tmp_path, clock):
    """make(spec) -> (directory, config, history, store, copies): a log of 30 records whose 4
    copied segments (cancellations in the first, third and fourth) are in `spec`'s store,
    its directory lost (empty), the clock past every deliverAfter; `copies` are the
    committed copies, oldest first."""
    def make(spec):
        directory = os.fspath(tmp_path / "p-0")
        config = spec.config(**CONFIG)
        history = tiered_history(directory, config, clock, 30)
        shutil.rmtree(directory)
        clock.advance(10**6)
        store = RemoteStore.open(spec.url, spec.options, "p-0")
        copies = [manifest.decode(store.get(name), name)
                  for name in sorted(store.list()) if name.endswith(manifest.MANIFEST_SUFFIX)]
        assert [CANCELLED_SUFFIX in c.objects for c in copies] == [True, False, True, True]
        return directory, config, history, store, copies
    return make


def _flipped(data: bytes) -> bytes:
    """`data` with a bit of its middle byte flipped."""
    out = bytearray(data)
    out[len(out) // 2] ^= 0x20
    return bytes(out)


def _garble(store: RemoteStore, name: str) -> None:
    store.put(name, _flipped(store.get(name)))


def _markers(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(REMOTE_SUFFIX))


def test_an_empty_directory_is_refused_when_the_newest_manifest_is_damaged(lost, remote,
                                                                           clock):
    directory, config, _, store, copies = lost(remote)
    name = manifest.manifest_name(copies[-1].base_offset)
    _garble(store, name)
    with pytest.raises(CorruptLogError, match=name):
        Log.open(directory, config=config, clock=clock)
    assert _markers(directory) == []  # nothing adopted: a repaired store restores it all
    store.put(name, manifest.encode(copies[-1]))
    with Log.open(directory, config=config, clock=clock) as log:
        assert log.log_start_offset == 0 and log.segments[:-1] == [c.base_offset
                                                                    for c in copies]


def test_an_older_damaged_manifest_ends_the_restored_history(lost, file_remote, clock):
    directory, config, history, store, copies = lost(file_remote)
    name = manifest.manifest_name(copies[1].base_offset)
    _garble(store, name)
    with Log.open(directory, config=config, clock=clock) as log:
        assert any(name in p for p in log.load_report.problems), log.load_report
        assert log.log_start_offset == copies[1].next_offset
        got = read_everything(log)
        assert got == {o: history.records[o] for o in range(copies[1].next_offset,
                                                             history.end)}
        assert log.append([Record(b"after")]).base_offset == history.end


def test_a_damaged_cancelled_object_is_never_turned_into_cancellations(lost, file_remote,
                                                                       clock):
    directory, config, history, store, copies = lost(file_remote)
    newest = copies[-1].object_name(CANCELLED_SUFFIX)
    whole = store.get(newest)
    for damaged in (_flipped(whole), whole[:-3], whole + whole):  # flipped, torn, longer
        store.put(newest, damaged)
        shutil.rmtree(directory, ignore_errors=True)
        with pytest.raises(CorruptLogError, match=newest):
            Log.open(directory, config=config, clock=clock)
    # the newest whole, an older one damaged: the history starts after that one
    store.put(newest, whole)
    older = copies[2].object_name(CANCELLED_SUFFIX)
    store.put(older, _flipped(store.get(older)))
    shutil.rmtree(directory)
    with Log.open(directory, config=config, clock=clock) as log:
        assert any(older in p for p in log.load_report.problems), log.load_report
        start = copies[2].next_offset
        assert log.log_start_offset == start
        fetched = [r.offset for r in log.fetch(max_records=100).records]
        assert fetched == sorted(set(range(start, history.end)) - history.cancelled,
                                 key=lambda o: (history.records[o][1], o))


def test_a_missing_object_is_found_by_the_first_read_that_needs_it(lost, file_remote, clock):
    directory, config, history, store, copies = lost(file_remote)
    gone = copies[1].object_name(LOG_SUFFIX)
    store.delete(gone)
    with Log.open(directory, config=config, clock=clock) as log:  # the manifests are whole
        assert log.log_start_offset == 0 and log.load_report.problems == []
        with pytest.raises(RemoteStorageError, match=gone):
            log.read(copies[1].base_offset)
        start = copies[2].base_offset
        assert log.read(start, max_records=1)[0].value == history.records[start][0]


@given(data=st.binary(max_size=64), flip=st.integers(0, 63))
def test_an_object_must_have_its_manifests_size_and_crc(data, flip):
    copy = manifest.RemoteCopy(0, 1, "0" * 16, 0, -1, None, None, False,
                               {".log": (0, 0), CANCELLED_SUFFIX: (len(data),
                                                                   crc32c.crc32c(data))})
    copy.check_object(CANCELLED_SUFFIX, data, "where")
    with pytest.raises(CorruptLogError, match="where"):
        copy.check_object(CANCELLED_SUFFIX, data + b"\0", "where")
    if data:
        damaged = bytearray(data)
        damaged[flip % len(data)] ^= 1
        with pytest.raises(CorruptLogError, match="CRC-32C"):
            copy.check_object(CANCELLED_SUFFIX, bytes(damaged), "where")




def test_a_manifest_of_another_segment_refuses_the_restore(lost, remote, clock):
    """The newest manifest is sound but describes an older segment than its name: a
    restore that believed it would end the log early and reuse stored offsets."""
    directory, config, history, store, copies = lost(remote)
    name = manifest.manifest_name(copies[-1].base_offset)
    store.put(name, manifest.encode(copies[-2]))  # valid bytes, the wrong segment
    with pytest.raises(CorruptLogError, match=name):
        Log.open(directory, config=config, clock=clock)
    assert _markers(directory) == []
    store.put(name, manifest.encode(copies[-1]))
    with Log.open(directory, config=config, clock=clock) as log:
        assert log.log_end_offset >= history.end


def test_a_missing_manifest_between_copies_ends_the_restored_history(lost, file_remote,
                                                                      clock):
    """Copies are adopted newest first and must meet end to end: past a missing one the
    log starts at the newer copy (reported), never with a hole in its offsets."""
    directory, config, history, store, copies = lost(file_remote)
    store.delete(manifest.manifest_name(copies[1].base_offset))
    with Log.open(directory, config=config, clock=clock) as log:
        assert log.log_start_offset == copies[2].base_offset
        assert any("adopted" in p for p in log.load_report.problems)
        got = read_everything(log)
        assert sorted(got) == list(range(copies[2].base_offset, log.log_end_offset))
        assert log.log_end_offset == history.end


def test_a_marker_holding_another_segments_manifest_is_not_trusted(tmp_path, file_remote,
                                                                    clock):
    """`N.remote` of a remote-only segment holding the manifest of another (sound bytes):
    the open restores it from the store's own manifest instead of serving the wrong
    offsets."""
    directory = os.fspath(tmp_path / "p-0")
    config = file_remote.config(**CONFIG)
    history = tiered_history(directory, config, clock, 30)
    markers = _markers(directory)
    with open(os.path.join(directory, markers[0]), "rb") as f:
        first = f.read()
    with open(os.path.join(directory, markers[1]), "wb") as f:
        f.write(first)  # segment 2's marker now names segment 1's copy
    clock.advance(10**6)
    with Log.open(directory, config=config, clock=clock) as log:
        assert any(markers[1][:20].lstrip("0") in p for p in log.load_report.problems)
        got = read_everything(log)
        assert sorted(got) == list(range(log.log_end_offset))
        assert all(history.records[o] == v for o, v in got.items() if o < history.end)
