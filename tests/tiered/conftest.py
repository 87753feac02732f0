"""Object stores for the tiered-storage tests: a real S3 endpoint on loopback (moto's
standalone server, started once per session on a free port and stopped by its PID) and a
local-filesystem store (`file://`).

`remote` is parametrized over both: a test that takes it runs once per store. Each test
gets its own prefix in the bucket (or its own directory), so tests never see each other's
objects. `remote_config(**fields)` is a LogConfig pointing at that store.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from kdelay import LogConfig

BUCKET = "kdelay-test"


@dataclass(frozen=True)
class RemoteSpec:
    """Where a test's copies go: `url` (a prefix of its own) and the store's options."""

    kind: str  # "s3" or "file"
    url: str
    options: dict

    def config(self, **fields) -> LogConfig:
        return LogConfig(remote_storage=self.url, remote_storage_options=dict(self.options),
                         **fields)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, log, timeout: float = 30.0) -> None:
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


@pytest.fixture(scope="session")
def moto_options(tmp_path_factory) -> Iterator[dict]:
    """A moto S3 server on 127.0.0.1 with bucket `kdelay-test`: the RemoteStore options
    that reach it. Stopped (by its PID) when the session ends."""
    moto = shutil.which("moto_server") or os.path.join(os.path.dirname(sys.executable),
                                                       "moto_server")
    port = _free_port()
    # its request log goes to a file: a pipe nobody reads would fill up and stall it
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w+b")  # noqa: SIM115
    proc = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, proc, log)
        endpoint = f"http://127.0.0.1:{port}"
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id="x", aws_secret_access_key="x"
                     ).create_bucket(Bucket=BUCKET)
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
        log.close()


@pytest.fixture
def file_remote(tmp_path) -> RemoteSpec:
    """A local-filesystem store in the test's own directory."""
    return RemoteSpec("file", f"file://{tmp_path / 'store'}", {})


@pytest.fixture
def s3_remote(moto_options) -> RemoteSpec:
    """The session's moto bucket under a prefix of the test's own."""
    return RemoteSpec("s3", f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}", dict(moto_options))


@pytest.fixture(params=["file", "s3"])
def remote(request) -> RemoteSpec:
    """Each store in turn: the test runs once against file:// and once against moto's S3."""
    return request.getfixturevalue(f"{request.param}_remote")
