"""Seeds derived from names, the same in every process.

`hash()` of a str is salted per interpreter (PYTHONHASHSEED), so a seed taken from it
changes from run to run and a failure it led to does not reproduce; a CRC of the parts'
text does not."""

from __future__ import annotations

import zlib

__all__ = ["stable_seed"]


def stable_seed(*parts: str | int | None) -> int:
    """A 32-bit seed for `parts` (names and numbers), equal in every process and run."""
    return zlib.crc32("\x1f".join(map(repr, parts)).encode())
