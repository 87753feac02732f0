"""A store that does not outlive the process (`memory://`): its copies vanish with the
process, so local retention never deletes a local file for it (they are the only lasting
record), whatever `local_retention_*` says. Closing and reopening loses nothing; a
directory whose segments are held only in such a store (a copy made by another process,
gone with it) is refused at open rather than served with holes."""

from __future__ import annotations

import os
import shutil

import pytest

from kdelay import Log, LogConfig, Record, RemoteStorageError
from kdelay.testing.checks import read_everything
from kdelay.testing.tiering import drop_local

pytestmark = pytest.mark.usefixtures("no_background_sync")

SMALL = dict(segment_bytes=1024, index_interval_bytes=128)


@pytest.mark.parametrize("retention", [dict(local_retention_bytes=0),
                                       dict(local_retention_ms=0)])
def test_a_volatile_store_never_takes_the_local_files(tmp_path, clock, retention):
    directory = os.fspath(tmp_path / "p-0")
    config = LogConfig(remote_storage="memory://", **SMALL, **retention)
    with Log.open(directory, config=config, clock=clock) as log:
        for i in range(40):
            log.append([Record(b"v%04d" % i + b"." * 60)], delay_ms=5)
        log.roll()
        clock.advance(10_000)
        result = log.sync_remote()
        assert result.copied and not result.local_deleted
        held = read_everything(log)
        m = log.metrics()["remote"]
        assert m["segments_local"] == len(log.segments) == m["segments_remote"] + 1
    with Log.open(directory, config=config, clock=clock) as log:
        assert read_everything(log) == held
        assert log.sync_remote().local_deleted == 0


def test_remote_only_segments_with_a_volatile_store_are_refused(tmp_path, file_remote,
                                                                 clock):
    directory = os.fspath(tmp_path / "p-0")
    config = file_remote.config(**SMALL)
    with Log.open(directory, config=config, clock=clock) as log:
        for i in range(40):
            log.append([Record(b"v%04d" % i + b"." * 60)], delay_ms=5)
        log.roll()
        log.sync_remote()
        first = log.segments[0]
    drop_local(directory, [first])
    shutil.rmtree(file_remote.url[len("file://"):])
    with pytest.raises(RemoteStorageError, match="vanishes with its process"):
        Log.open(directory, config=LogConfig(remote_storage="memory://", **SMALL),
                 clock=clock)


def test_verify_remote_on_a_volatile_store(tmp_path, clock):
    """`kdelay verify --remote` has nothing to check in a store that vanished: a note for
    a directory that kept every file, a problem for one with remote-only segments."""
    import json

    from conftest import run_cli

    directory = os.fspath(tmp_path / "p-0")
    config = LogConfig(remote_storage="memory://", local_retention_bytes=0, **SMALL)
    with Log.open(directory, config=config, clock=clock) as log:
        for i in range(40):
            log.append([Record(b"v%04d" % i + b"." * 60)], delay_ms=5)
        log.roll()
        log.sync_remote()
        first = log.segments[0]
    rc, out, _ = run_cli("verify", "--remote", "--json", directory)
    findings = json.loads(out)["partitions"][0]["findings"]
    assert rc == 0 and any("vanishes" in f["message"] for f in findings)
    drop_local(directory, [first])
    rc, out, _ = run_cli("verify", "--remote", "--json", directory)
    findings = json.loads(out)["partitions"][0]["findings"]
    assert rc == 1 and any("records are lost" in f["message"] for f in findings)
