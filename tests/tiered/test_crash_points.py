"""Crash at every file and store operation of a copy, a local deletion and a remote
deletion (FaultInjector + StoreFaults counting in one sequence), in each crash mode; then
reopen and sync again. Every record the log still holds reads exactly once, no committed
manifest names a missing object, nothing is left that no manifest names, no `N.remote`
claims a copy the store lacks, and the log start never passes where the run without a
crash left it (nothing uncopied is lost)."""

from __future__ import annotations

import os
import shutil

import pytest

from kdelay import Log, Record
from kdelay.log.segments.layout import REMOTE_SUFFIX, parse_segment_name
from kdelay.log.tiered import manifest
from kdelay.remote.store import RemoteStore
from kdelay.testing.faults import CRASH_MODES, FaultInjector, SimulatedCrash
from kdelay.testing.store_faults import StoreFaults, crash_during

CONFIG = dict(segment_bytes=1024, index_interval_bytes=128, retention_ms=1000,
              local_retention_bytes=1500)


def _value(i: int) -> bytes:
    return b"r%04d" % i + b"." * 60


def _prepare(directory: str, file_remote, clock) -> Log:
    log = Log.open(directory, config=file_remote.config(**CONFIG), clock=clock)
    for i in range(40):  # the first half comes due at once, the rest much later
        log.append([Record(_value(i))], delay_ms=0 if i < 20 else 10**9)
    log.cancel([25])
    return log


def _protocols(log: Log, clock) -> None:
    """A copy of every sealed segment with local retention, then retention of the whole
    log and the deletion of remote copies."""
    log.sync_remote()
    clock.advance(5000)
    log.enforce_retention()
    log.sync_remote()


def _check(directory: str, file_remote, clock, allowed_start: int) -> None:
    log = Log.open(directory, config=file_remote.config(**CONFIG), clock=clock)
    try:
        log.sync_remote()
        start = log.log_start_offset
        assert start <= allowed_start
        read, offset = [], start
        while batch := log.read(offset, max_records=100):
            read += [(r.offset, r.value) for r in batch]
            offset = batch[-1].offset + 1
        assert read == [(i, _value(i)) for i in range(start, 40)]
        store = log._tier.store
        listing = store.list()
        named = set()
        for name in listing:
            parsed = manifest.parse_object_name(name)
            if parsed is None or parsed[2] != manifest.MANIFEST_SUFFIX:
                continue
            copy = manifest.decode(store.get(name), name)
            for suffix, (size, _) in copy.objects.items():
                assert listing.get(copy.object_name(suffix)) == size, (name, suffix)
                named.add(copy.object_name(suffix))
        orphans = {n for n in listing
                   if not n.endswith(manifest.MANIFEST_SUFFIX) and n not in named}
        assert orphans == set()
        for name in os.listdir(directory):
            parsed = parse_segment_name(name)
            if parsed is not None and parsed[1] == REMOTE_SUFFIX:
                assert manifest.manifest_name(parsed[0]) in listing, name
    finally:
        log.close()


def _store_dir(file_remote) -> str:
    return file_remote.url[len("file://"):]


def test_a_crash_at_any_operation_of_copy_and_deletions_loses_nothing(
        tmp_path, file_remote, clock, no_background_sync):
    template = os.fspath(tmp_path / "template")
    log = _prepare(template, file_remote, clock)
    log.close()
    shutil.copytree(_store_dir(file_remote), os.fspath(tmp_path / "template-store"))
    t0 = clock.t

    def fresh(name: str) -> str:
        directory = os.fspath(tmp_path / name)
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(template, directory)
        shutil.rmtree(_store_dir(file_remote))
        shutil.copytree(os.fspath(tmp_path / "template-store"), _store_dir(file_remote))
        clock.t = t0
        return directory

    # the run without a crash: how many operations, and where it leaves the log start
    directory = fresh("p-0")
    with FaultInjector([directory]) as files, StoreFaults(files=files):
        log = Log.open(directory, config=file_remote.config(**CONFIG), clock=clock)
        _protocols(log, clock)
        allowed_start = log.log_start_offset
        log.close()
    operations = len(files.ops)
    assert any(op.startswith("store.put") for op, _ in files.ops)
    assert any(op == "store.delete" for op, _ in files.ops)
    assert allowed_start > 0

    for mode in CRASH_MODES:
        for crash_at in range(0, operations, 1 if mode == "process" else 3):
            directory = fresh("p-0")
            crashed = crash_during(directory, crash_at, mode, lambda path: Log.open(
                path, config=file_remote.config(**CONFIG), clock=clock),
                lambda log: _protocols(log, clock))
            clock.t = t0 + 5000
            try:
                _check(directory, file_remote, clock, allowed_start)
            except AssertionError as e:
                raise AssertionError(f"crash in mode {mode} before operation {crash_at} "
                                     f"{crashed}: {e}") from e


def test_store_faults_count_and_fail_store_operations(tmp_path):
    store = RemoteStore.open(f"file://{tmp_path}", {}, "p-0")
    with StoreFaults() as faults:
        store.put("a", b"x")
        store.get("a")
        store.list()
    assert [op for op, _ in faults.ops] == ["put", "get", "list"]
    with StoreFaults(crash_at=1) as faults:
        store.size("a")
        with pytest.raises(SimulatedCrash):
            store.delete("a")
        with pytest.raises(SimulatedCrash):
            store.get("a")  # dead from the crash on
    assert store.get("a") == b"x"
    with StoreFaults(unreachable=lambda op, name: op == "get"):
        assert store.size("a") == 1
        with pytest.raises(Exception, match="unreachable"):
            store.get("a")


def test_crash_during_crashes_at_the_operation_and_leaves_the_directory_openable(tmp_path):
    directory = os.fspath(tmp_path / "p-0")
    with FaultInjector([]) as files, Log.open(directory) as log:
        log.append([Record(b"x")])
    last = len(files.ops) - 1  # the clean close's last operation
    ran: list[Log] = []
    for crash_at, mode in ((0, "power"), (last, "process")):
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)

        def append(log: Log) -> None:
            ran.append(log)
            log.append([Record(b"x")])

        op = crash_during(directory, crash_at, mode, Log.open, append)
        assert op[0] == files.ops[crash_at][0]
        with Log.open(directory) as log:  # the dead log's lock is released
            assert [r.value for r in log.read(0)] == ([b"x"] if crash_at else [])
    assert len(ran) == 1  # the first crash came before the protocol
