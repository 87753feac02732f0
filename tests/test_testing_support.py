"""kdelay.testing's small helpers, held to what the suites rely on: `files_under` sees
every byte of every file below a directory."""

from __future__ import annotations

import os

from kdelay.testing.checks import files_under


def test_files_under_sees_every_file_and_byte(tmp_path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "x").write_bytes(b"1")
    (tmp_path / "a" / "b" / "y").write_bytes(b"")
    before = files_under(str(tmp_path))
    assert before == {"x": b"1", os.path.join("a", "b", "y"): b""}
    (tmp_path / "a" / "b" / "y").write_bytes(b"\0")
    assert files_under(str(tmp_path)) != before
