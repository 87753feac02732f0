"""Consumer-group positions: one small file per group, replaced atomically on commit.

A position is the DeliveryKey of the last record the group consumed. Group names are
hex-encoded into file names, so no name can reach outside the log directory.
"""

from __future__ import annotations

import os
import threading

import crc32c

from .. import fsio
from ..errors import KdelayError
from ..records import DeliveryKey

GROUPS_DIR = "groups"
_TAG = "kdelay-group v1"


class GroupStore:
    def __init__(self, log_path: str):
        self.directory = os.path.join(log_path, GROUPS_DIR)
        self._cache: dict[str, DeliveryKey | None] = {}
        self._lock = threading.Lock()

    def _file(self, group: str) -> str:
        if not isinstance(group, str) or not group:
            raise KdelayError(f"group must be a non-empty str, got {group!r}")
        return os.path.join(self.directory, group.encode("utf-8").hex() + ".pos")

    def commit(self, group: str, key: DeliveryKey | None) -> None:
        path = self._file(group)
        body = "none" if key is None else f"{key.deliver_after} {key.offset}"
        text = f"{_TAG}\n{group}\n{body}\n"
        data = f"{text}{crc32c.crc32c(text.encode('utf-8')):08x}\n".encode()
        with self._lock:
            if not os.path.isdir(self.directory):
                os.makedirs(self.directory, exist_ok=True)
                fsio.fsync_dir(os.path.dirname(self.directory))
            fsio.atomic_write(path, data)
            self._cache[group] = key

    def committed(self, group: str) -> DeliveryKey | None:
        path = self._file(group)
        with self._lock:
            if group in self._cache:
                return self._cache[group]
            raw = fsio.read_small(path)
            key = None if raw is None else _parse(raw, path)
            self._cache[group] = key
            return key

    def groups(self) -> list[str]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if name.endswith(".pos"):
                try:
                    out.append(bytes.fromhex(name[:-4]).decode("utf-8"))
                except ValueError:
                    continue
        return sorted(out)


def _parse(raw: bytes, path: str) -> DeliveryKey | None:
    try:
        lines = raw.decode("utf-8").split("\n")
        text = "\n".join(lines[:3]) + "\n"
        if lines[0] != _TAG or f"{crc32c.crc32c(text.encode('utf-8')):08x}" != lines[3]:
            raise ValueError("checksum")
        if lines[2] == "none":
            return None
        da, off = lines[2].split(" ")
        return DeliveryKey(int(da), int(off))
    except (ValueError, IndexError, UnicodeDecodeError):
        raise KdelayError(f"group position file {path} is corrupt") from None
