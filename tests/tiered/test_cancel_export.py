"""Cancellations and reschedules of copied records reach the store: the sync writes each
copied segment's cancellations (those made since the copy too) as its `.cancellations`
object, and a restore reads it. After `sync_remote()` returns, losing the local disk
brings back no cancelled record and no rescheduled original; between syncs, at most what
was cancelled since the last one. The object is written only when a segment's
cancellations changed (none for a pass with nothing new, none after a reopen)."""

from __future__ import annotations

import os
import shutil

import pytest

from kdelay import CorruptLogError, Log, Record
from kdelay.log.tiered.cancelled_object import CANCELLATIONS_SUFFIX
from kdelay.testing.checks import fetch_everything
from kdelay.testing.store_faults import StoreFaults

pytestmark = pytest.mark.usefixtures("no_background_sync")

CONFIG = dict(segment_bytes=1024, index_interval_bytes=128)


def _fill(log: Log, n: int = 40) -> None:
    for i in range(n):
        log.append([Record(b"v%04d" % i + b"." * 60)], delay_ms=10**6 + i)


def _delivered(directory: str, config, clock) -> set[int]:
    clock.advance(10**8)
    with Log.open(directory, config=config, clock=clock) as log:
        return {r.offset for r in fetch_everything(log, 500)}


def test_cancels_and_reschedules_after_the_copy_survive_the_loss_of_the_disk(
        tmp_path, remote, clock):
    directory = os.fspath(tmp_path / "p-0")
    config = remote.config(**CONFIG)
    with Log.open(directory, config=config, clock=clock) as log:
        _fill(log)
        log.roll()
        assert log.sync_remote().copied
        copied_end = log.segments[-1]
        assert log.cancel([2, 20]) == 2  # in copied segments
        moved = log.reschedule(30, delay_ms=5 * 10**6)  # its copy stays local (active)
        log.sync_remote()
        assert moved.base_offset >= copied_end
    shutil.rmtree(directory)  # the local disk is lost
    got = _delivered(directory, config, clock)
    assert not {2, 20, 30} & got, sorted({2, 20, 30} & got)
    assert set(range(copied_end)) - {2, 20, 30} <= got


def test_between_syncs_only_what_was_cancelled_since_comes_back(tmp_path, remote, clock):
    directory = os.fspath(tmp_path / "p-0")
    config = remote.config(**CONFIG)
    with Log.open(directory, config=config, clock=clock) as log:
        _fill(log)
        log.roll()
        log.sync_remote()
        log.cancel([5])
        log.sync_remote()
        log.cancel([6])  # not synced
    shutil.rmtree(directory)
    got = _delivered(directory, config, clock)
    assert 5 not in got and 6 in got


def test_the_object_is_written_only_when_cancellations_changed(tmp_path, file_remote,
                                                               clock):
    directory = os.fspath(tmp_path / "p-0")
    config = file_remote.config(**CONFIG)
    with Log.open(directory, config=config, clock=clock) as log:
        _fill(log)
        log.roll()
        log.sync_remote()
        log.cancel([1, 2, 25])
        with StoreFaults() as faults:
            log.sync_remote()
        puts = [n for op, n in faults.ops if op == "put"]
        assert sorted(n[:20] for n in puts) == sorted(
            {f"{log._segments.segment_for(o).base_offset:020d}" for o in (1, 2, 25)})
        assert all(n.endswith(CANCELLATIONS_SUFFIX) for n in puts)
        with StoreFaults() as faults:
            log.sync_remote()
        assert not [op for op, _ in faults.ops if op == "put"]
    with Log.open(directory, config=config, clock=clock) as log, StoreFaults() as faults:
        log.sync_remote()  # what the store holds is learnt from one listing
        assert not [op for op, _ in faults.ops if op == "put"]


def test_a_damaged_cancellations_object_stops_the_restore(tmp_path, remote, clock):
    """Damaged (cut short, or a bit flipped): the newest copy's refuses the restore of an
    empty directory, naming the object; an older copy's ends the restored history there
    (reported), as a damaged `.cancelled` object does. Never a cancelled record served."""
    directory = os.fspath(tmp_path / "p-0")
    config = remote.config(**CONFIG)
    with Log.open(directory, config=config, clock=clock) as log:
        _fill(log)
        log.roll()
        log.sync_remote()
        copied = log.segments[:-1]
        newest = copied[-1]
        log.cancel([2, newest])
        log.sync_remote()
        store = log._tier.store
    shutil.rmtree(directory)
    names = sorted(n for n in store.list() if n.endswith(CANCELLATIONS_SUFFIX))
    assert [int(n[:20]) for n in names] == [0, newest]
    for name, refused in ((names[1], True), (names[0], False)):
        good = store.get(name)
        for bad in (good[:-3], good[:20] + bytes([good[20] ^ 1]) + good[21:]):
            store.put(name, bad)
            if refused:
                with pytest.raises(CorruptLogError, match=name):
                    Log.open(directory, config=config, clock=clock)
            else:
                with Log.open(directory, config=config, clock=clock) as log:
                    assert log.log_start_offset == copied[1]
                    assert any(name in p for p in log.load_report.problems)
                shutil.rmtree(directory)
        store.put(name, good)
    got = _delivered(directory, config, clock)
    assert 2 not in got and newest not in got and 3 in got


def test_verify_remote_checks_the_cancellations_object(tmp_path, file_remote, clock):
    import json

    from conftest import run_cli

    directory = os.fspath(tmp_path / "p-0")
    config = file_remote.config(**CONFIG)
    with Log.open(directory, config=config, clock=clock) as log:
        _fill(log)
        log.cancel([1])
        log.roll()
        log.sync_remote()  # segment 0's .cancelled holds 1
        log.cancel([2])
        log.sync_remote()  # its .cancellations holds 1 and 2
        store = log._tier.store
    rc, out, _ = run_cli("verify", "--remote", "--json", directory)
    assert rc == 0, out
    name = next(n for n in store.list() if n.endswith(CANCELLATIONS_SUFFIX))
    good = store.get(name)
    from kdelay.log.tiered.cancelled_object import encode_cancellations

    for bad, says in ((good[:-1], "not a cancellations object"),
                      (good[:-5] + bytes([good[-5] ^ 1]) + good[-4:], "CRC"),
                      (encode_cancellations(0, int.from_bytes(good[16:24], "little"), [2]),
                       "lacks 1 offsets")):
        store.put(name, bad)
        rc, out, _ = run_cli("verify", "--remote", "--json", directory)
        messages = [f["message"] for f in json.loads(out)["partitions"][0]["findings"]
                    if f["severity"] != "info"]
        assert rc == 1 and any(says in m for m in messages), messages
