"""The recovery point: the offset below which a log's segments are known fsync'd.

`recovery-point-offset-checkpoint` holds ASCII "kdelay-recovery-point v1\n<offset>\nend
<offset>\n", replaced atomically (fsio.atomic_write). Rolling a segment (segment_set.py)
writes it; opening a log (kdelay.log.local.loader) reads it to know where to scan from.
"""

from __future__ import annotations

import os

from ... import fsio
from .layout import RECOVERY_POINT_FILE

_CHECKPOINT_TAG = "kdelay-recovery-point v1"


def read_recovery_point(directory: str) -> int:
    """Offsets below the recovery point are known fsync'd. Unreadable means 0 (scan all)."""
    raw = fsio.read_small(os.path.join(directory, RECOVERY_POINT_FILE))
    if raw is None:
        return 0
    try:
        tag, value, check = raw.decode("ascii").split("\n")[:3]
        if tag != _CHECKPOINT_TAG or check != f"end {value}":
            return 0
        return max(0, int(value))
    except (UnicodeDecodeError, ValueError):
        return 0


def write_recovery_point(directory: str, offset: int) -> None:
    data = f"{_CHECKPOINT_TAG}\n{offset}\nend {offset}\n".encode("ascii")
    fsio.atomic_write(os.path.join(directory, RECOVERY_POINT_FILE), data)
