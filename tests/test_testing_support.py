"""kdelay.testing's small helpers, held to what the suites rely on: `files_under` sees
every byte of every file below a directory, and `Stall` stops at exactly the chosen file
operation, only while started."""

from __future__ import annotations

import os

import pytest

from kdelay import fsio
from kdelay.testing import stalls
from kdelay.testing.checks import files_under
from kdelay.testing.stalls import Stall


def test_files_under_sees_every_file_and_byte(tmp_path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "x").write_bytes(b"1")
    (tmp_path / "a" / "b" / "y").write_bytes(b"")
    before = files_under(str(tmp_path))
    assert before == {"x": b"1", os.path.join("a", "b", "y"): b""}
    (tmp_path / "a" / "b" / "y").write_bytes(b"\0")
    assert files_under(str(tmp_path)) != before


class Stalled(Exception):
    pass


def test_stall_stops_at_the_chosen_call_only_while_started(tmp_path, monkeypatch) -> None:
    for name in ("write", "fsync"):
        monkeypatch.setattr(fsio, name, getattr(fsio, name))  # restored after the test
    monkeypatch.setattr(stalls.time, "sleep", lambda s: (_ for _ in ()).throw(Stalled()))
    stall = Stall("write:1", ("write", "fsync"))
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        fsio.write(fd, b"a", 0)  # not started: not counted
        fsio.write(fd, b"b", 1)
        stall.start()
        fsio.fsync(fd)
        fsio.write(fd, b"c", 2)  # write 0
        with pytest.raises(Stalled):
            fsio.write(fd, b"d", 3)  # write 1: stops before it is made
        assert os.pread(fd, 10, 0) == b"abc"
        stall.start()  # counts from 0 again
        fsio.write(fd, b"e", 3)
        stall.stop()
        fsio.write(fd, b"f", 4)
    finally:
        os.close(fd)
    assert stall.calls == {"write": 0}  # "e" only: "f" came after stop()
    plain = fsio.write
    Stall("-", ("write",)).start()
    assert fsio.write is plain  # "-" wraps nothing
