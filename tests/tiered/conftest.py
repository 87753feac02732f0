"""Object stores for the tiered-storage tests: a real S3 endpoint on loopback (moto's
standalone server, started once per session on a free port and stopped by its PID) and a
local-filesystem store (`file://`).

`remote` is parametrized over both: a test that takes it runs once per store. Each test
gets its own prefix in the bucket (or its own directory), so tests never see each other's
objects. `remote_config(**fields)` is a LogConfig pointing at that store.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from kdelay import LogConfig
from kdelay.testing.tiering import moto_server

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


@pytest.fixture(scope="session")
def moto_options() -> Iterator[dict]:
    """A moto S3 server on 127.0.0.1 with bucket `kdelay-test`: the RemoteStore options
    that reach it. Stopped (by its PID) when the session ends."""
    with moto_server(BUCKET) as options:
        yield options


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


@pytest.fixture
def no_background_sync(monkeypatch) -> None:
    """Only the test's own `sync_remote()` passes run: no background pass copies or
    deletes beside the test, so a crash point is the same operation every time and a
    pass's counts are the test's to check."""
    from kdelay.log.tiered.sync import RemoteSync

    monkeypatch.setattr(RemoteSync, "start", lambda self: None)
