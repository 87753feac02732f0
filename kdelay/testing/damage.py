"""Damage to real files, as the damage tests make it: one byte's bits flipped in place."""

from __future__ import annotations

import os


def flip_byte(path: str | os.PathLike, at: int, mask: int = 0x01) -> None:
    """XOR the byte at offset `at` of the file at `path` with `mask` (in place; the file's
    size is unchanged)."""
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        if len(byte) != 1:
            raise ValueError(f"{os.fspath(path)} has no byte at {at}")
        f.seek(at)
        f.write(bytes([byte[0] ^ mask]))
