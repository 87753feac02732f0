"""Making tiered logs for tests and benchmarks: an S3 store to copy to (moto's standalone
server on loopback); copy a log's sealed segments to a store with the log's own sync
(kdelay/log/tiered/sync.py), then make some remote-only by deleting their local .log and
indexes (their `N.remote` marker and cancel files stay), as local retention does. And the
check of a directory restored from its copies."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass, replace

from kdelay import Log, LogConfig, Record
from kdelay.fsio import read_small
from kdelay.log.segments.layout import (
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    MARKER_SUFFIX,
    REMOTE_SUFFIX,
    parse_segment_name,
    segment_bases,
    segment_file,
)
from kdelay.log.tiered.manifest import manifest_name
from kdelay.testing.checks import fetch_everything, read_everything


@contextlib.contextmanager
def moto_server(bucket: str) -> Iterator[dict]:
    """A moto S3 server on a free 127.0.0.1 port with `bucket` created: yields the
    RemoteStore options that reach it. Stopped (by its PID) on leaving."""
    moto = shutil.which("moto_server") or os.path.join(os.path.dirname(sys.executable),
                                                       "moto_server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # its request log goes to a file: a pipe nobody reads would fill up and stall it
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_for_port(port, proc, log)
            endpoint = f"http://127.0.0.1:{port}"
            import boto3  # (moto's dependency: only where a server is started)

            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                         aws_access_key_id="x", aws_secret_access_key="x"
                         ).create_bucket(Bucket=bucket)
            yield {"endpoint": endpoint, "region": "us-east-1", "access_key_id": "x",
                   "secret_access_key": "x", "allow_http": True}
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_for_port(port: int, proc: subprocess.Popen, log, timeout: float = 30.0) -> None:
    """Until the server listens on `port`; RuntimeError (with the end of its `log`) if it
    exits first or does not listen within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"moto_server exited with {proc.returncode}: "
                               f"{log.read().decode(errors='replace')[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"moto_server did not listen on 127.0.0.1:{port} within {timeout}s")


def tier_out(path: str, config: LogConfig, *, remote_only: int | None = None) -> list[int]:
    """Copy every sealed segment of the (closed) log at `path` to `config`'s store (the
    log's own sync pass, which also records the store in the directory); then delete the
    local files of the first `remote_only` copied segments (all of them when None).
    Returns the copied bases."""
    keep_local = replace(config, local_retention_ms=-1, local_retention_bytes=-1)
    # a clock that never passes the one the log last closed with (the log's clock is the
    # max of every reading): copying moves no record nearer to being due
    with Log.open(path, config=keep_local, clock=lambda: 0) as log:
        log.sync_remote()
        bases = log.segments[:-1]
    drop_local(path, bases[:remote_only])
    return bases


def drop_local(path: str, bases: list[int]) -> None:
    """Delete the local .log, indexes and compaction marker of copied segments."""
    assert set(bases) <= set(segment_bases(path))
    for base in bases:
        for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES, MARKER_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(segment_file(path, base, suffix))


@dataclass(frozen=True)
class History:
    """What a log's copies hold, as a restore must give it back: offset -> (value,
    deliverAfter) of every copied record, from offset 0, the cancelled offsets (of all); and
    the records after them, held only in the directory (`local`: lost with it)."""

    records: Mapping[int, tuple[bytes | None, int]]
    cancelled: Set[int]
    local: Mapping[int, tuple[bytes | None, int]]

    @property
    def end(self) -> int:
        """The offset after the last copied record: where appends go after a restore."""
        return max(self.records) + 1


def tiered_history(path: str, config: LogConfig, clock, records: int, *,
                   remote_only: int | None = None) -> History:
    """Write a log at `path` of `records` one-record batches (deliverAfters out of offset
    order, every eleventh record cancelled while pending), copy its sealed segments to
    `config`'s store and make the first `remote_only` of them remote-only (all: None; the
    active segment stays local and is not part of the history). `clock` is the log's; moved past every deliverAfter after this, a
    drain returns every record."""
    with Log.open(path, config=replace(config, remote_storage=None), clock=clock) as log:
        for i in range(records):
            log.append([Record(b"h%05d." % i + b"." * 50, key=b"k%d" % (i % 5))],
                       delay_ms=1000 + (i * 7919) % 1000 * 100)
        log.cancel(range(3, records, 11))
        end = log.segments[-1]
        held = read_everything(log)
    tier_out(path, config, remote_only=remote_only)
    return History({o: v for o, v in held.items() if o < end}, frozenset(range(3, records, 11)),
                   {o: v for o, v in held.items() if o >= end})


def check_restored(log: Log, history: History, appended: Mapping[int, bytes] | None = None,
                   must_have: Set[int] = frozenset()) -> None:
    """`log`, opened on a directory restored from `history`'s copies with its clock past
    every deliverAfter, holds the history from offset 0: every record exactly once, in
    offset order, with its bytes; past the history only records of `appended` (offset ->
    value; those of `must_have` among them); a due-order drain gives every record not
    cancelled in (deliverAfter, offset) order; every `N.remote` is byte for byte its
    manifest in the store. Then one append lands at the log end, past the history."""
    appended = appended or {}
    got = read_everything(log)
    assert log.log_start_offset == 0, log.log_start_offset
    assert sorted(got) == list(range(log.log_end_offset)), "offsets not contiguous from 0"
    for offset, (value, deliver_after) in got.items():
        if offset < history.end:
            assert history.records[offset] == (value, deliver_after), offset
        else:
            assert appended.get(offset) == value, f"record {offset} was never appended"
    assert log.log_end_offset >= history.end
    assert must_have <= set(got), sorted(must_have - set(got))[:10]
    # the local tail's cancellations count only where the directory kept its records
    cancelled = {o for o in history.cancelled
                 if o < history.end or history.local.get(o) == got.get(o)}
    fetched = fetch_everything(log, page_size=50)
    assert [(r.deliver_after, r.offset) for r in fetched] == sorted(
        (da, o) for o, (_, da) in got.items() if o not in cancelled)
    assert all(got[r.offset][0] == r.value for r in fetched)
    assert log._tier is not None, "a log with tiered storage"
    store = log._tier.store
    for name in os.listdir(log.path):
        parsed = parse_segment_name(name)
        if parsed is not None and parsed[1] == REMOTE_SUFFIX:
            assert read_small(os.path.join(log.path, name)) == store.get(
                manifest_name(parsed[0])), f"{name} is not its manifest"
    end = log.log_end_offset
    assert log.append([Record(b"after the restore")]).base_offset == end
    assert log.read(end)[0].value == b"after the restore"
