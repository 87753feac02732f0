"""Per-group position files of earlier versions, `groups/<hex of group name>.pos`, read so
that a log directory written by them opens with the same positions (`positions.py` folds
them into the commit journal at its first write, then removes them). Both of their formats
are read by `position_file.py`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import fsio
from ..errors import CorruptLogError
from .position_file import MAX_FILE_BYTES, PositionFile, Slot, current_or_raise, parse

SUFFIX = ".pos"


@dataclass(frozen=True)
class LegacyFile:
    group: str
    path: str
    file: PositionFile

    def current(self) -> Slot:
        """The newest valid record; CorruptLogError naming the file if it has none."""
        return current_or_raise(self.file, self.path)

    def readable(self) -> CorruptLogError | None:
        """None if the file holds a valid record, else the error reading it raises."""
        try:
            self.current()
        except CorruptLogError as e:
            return e
        return None


def legacy_path(directory: str, group: str) -> str:
    return os.path.join(directory, group.encode("utf-8").hex() + SUFFIX)


def read_legacy(directory: str) -> list[LegacyFile]:
    """Every per-group position file in `directory` (the log's groups directory), parsed;
    names that are not hex of UTF-8 are not ours and are skipped. O(files): one read of
    at most 1 KiB each."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        if not name.endswith(SUFFIX):
            continue
        try:
            group = bytes.fromhex(name[:-len(SUFFIX)]).decode("utf-8")
        except ValueError:
            continue
        path = os.path.join(directory, name)
        raw = fsio.read_small(path)
        if raw is not None and group:
            out.append(LegacyFile(group, path, parse(raw[:MAX_FILE_BYTES], group)))
    return out
