"""The one mapping of a write's OSError to LogWriteError (kdelay.errors.raise_write_error):
what write_errors wraps around every writing method, and what Log.append applies itself."""

from __future__ import annotations

import errno
import os

import pytest

from kdelay import KdelayError, Log, LogWriteError, Record, fsio
from kdelay.errors import raise_write_error, write_errors


def test_an_oserror_becomes_a_log_write_error_keeping_errno_and_filename():
    error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/d/0.log")
    with pytest.raises(LogWriteError) as caught:
        try:
            raise error
        except OSError as e:
            raise_write_error(e, "append", "/d")
    assert isinstance(caught.value, KdelayError) and isinstance(caught.value, OSError)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == "/d/0.log"
    assert str(caught.value).startswith(f"[Errno {errno.ENOSPC}] append on /d failed: ")
    assert caught.value.__cause__ is error


def test_a_log_write_error_passes_as_it_is():
    error = LogWriteError(errno.EIO, "already mapped", "f")
    with pytest.raises(LogWriteError) as caught:
        raise_write_error(error, "append", "/d")
    assert caught.value is error


def test_the_decorator_and_log_append_map_alike(tmp_path, monkeypatch):
    class Writing:
        path = "/d"

        @write_errors
        def append(self) -> None:
            raise OSError(errno.EIO, os.strerror(errno.EIO), "x")

    with pytest.raises(LogWriteError) as decorated:
        Writing().append()
    path = str(tmp_path / "p")

    def failing(fd: int, data: bytes, position: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO), "x")

    with Log.open(path) as log:
        monkeypatch.setattr(fsio, "write", failing)
        with pytest.raises(LogWriteError) as appended:
            log.append([Record(b"v")])
        monkeypatch.undo()
        assert log.log_end_offset == 0  # nothing of the refused append
    assert str(decorated.value).replace("/d", path) == str(appended.value)
    assert (decorated.value.errno, decorated.value.filename) == (
        appended.value.errno, appended.value.filename)
