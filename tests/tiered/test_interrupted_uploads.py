"""An interrupted multipart upload: the store's connection cut in the middle of a large
`.log` copy (sent in parts). The copy recovers (a later pass copies the segment again),
and what the interrupted upload left open in the store is aborted by a later sync:
no multipart upload of the partition survives it (another partition's is not touched)."""

from __future__ import annotations

import os

import pytest

from kdelay import Log, LogConfig, Record, RemoteStorageError
from kdelay.testing.checks import read_everything
from kdelay.testing.store_cut import CuttingProxy

pytestmark = pytest.mark.usefixtures("no_background_sync")

BUCKET = "kdelay-test"


def _s3(options: dict):
    import boto3

    return boto3.client("s3", endpoint_url=options["endpoint"], region_name="us-east-1",
                        aws_access_key_id="x", aws_secret_access_key="x")


def _open_uploads(options: dict, prefix: str) -> list[dict]:
    return _s3(options).list_multipart_uploads(Bucket=BUCKET, Prefix=prefix).get("Uploads", [])


def _start_upload(options: dict, key: str) -> str:
    return _s3(options).create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]


def test_a_cut_multipart_upload_is_aborted_by_a_later_sync(tmp_path, moto_options, clock):
    prefix = "cut-" + os.path.basename(tmp_path)
    directory = os.fspath(tmp_path / "p-0")
    with CuttingProxy(moto_options["endpoint"]) as proxy:
        config = LogConfig(remote_storage=f"s3://{BUCKET}/{prefix}",
                           remote_storage_options={**moto_options, "endpoint": proxy.endpoint},
                           segment_bytes=12 << 20, remote_timeout_ms=5000)
        with Log.open(directory, config=config, clock=clock) as log:
            value = os.urandom(100_000)
            for i in range(95):  # ~9.5 MiB: sent in parts of 5 MiB
                log.append([Record(value + b"%04d" % i)], delay_ms=5)
            log.roll()
            held = read_everything(log)
            proxy.restore(cut_after=3 << 20)  # the store goes away after 3 MiB
            with pytest.raises(RemoteStorageError):
                log.sync_remote()
            assert proxy.down
            assert _open_uploads(moto_options, prefix), "no multipart upload was started"
            other = _start_upload(moto_options, f"{prefix}/p-1/x.log")  # another partition
            proxy.restore()
            log.sync_remote()  # copies again, and sweeps what the cut left
            assert log.metrics()["remote"]["copies_pending"] == 0
            assert [u["UploadId"] for u in _open_uploads(moto_options, prefix)] == [other]
            assert read_everything(log) == held


def test_a_killed_upload_to_a_file_store_leaves_no_staging_file(tmp_path, file_remote,
                                                                 clock):
    """A file:// store's multipart upload is a staging file `<object>#<n>` beside the
    object, invisible to listings: what a process killed in the middle of a large put
    leaves there (seen with obstore 0.12: `N.C.log#1`). The next open's sync removes it,
    and a staging file of another partition stays."""
    directory = os.fspath(tmp_path / "p-0")
    config = file_remote.config(segment_bytes=1024)
    store_dir = file_remote.url[len("file://"):]
    with Log.open(directory, config=config, clock=clock) as log:
        log.append([Record(b"x" * 2000)])
        log.roll()
        log.sync_remote()
    left = os.path.join(store_dir, "p-0", "00000000000000000000.0123456789abcdef.log#1")
    other = os.path.join(store_dir, "p-1", "00000000000000000000.0123456789abcdef.log#1")
    for path in (left, other):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"part of an upload")
    with Log.open(directory, config=config, clock=clock) as log:
        log.sync_remote()  # the first pass after an open sweeps
    assert not os.path.exists(left) and os.path.exists(other)
