"""A remote segment's manifest: the commit point of its copy, and the names of its objects.

A sealed segment with base offset B (its 20-digit name N) is copied to the store as objects
named by a copy id C, fresh for every attempt (16 hex digits), under the partition's place
(`<prefix>/<partition directory>/`, kdelay.remote.store):

    N.C.log          the .log, byte for byte
    N.C.index        the offset index, N.C.timeindex the time index,
    N.C.dlyindex     the DeliverAfterIndex, as the segment persisted them on roll
    N.C.compacted    the compaction marker (only for a segment compaction rewrote)
    N.C.cancelled    the offsets cancelled when the copy was made, sorted, 8 bytes each
                     little-endian (only if there are any)
    N.manifest       this manifest: written last, with a conditional create

The copy is committed when `N.manifest` exists: a reader trusts no object that no manifest
names, so a copy interrupted at any point is never served, and what it left (objects of a
copy id no manifest names) is removed by a later sync. Because the create is conditional,
two attempts to copy one segment cannot both commit: the loser finds the manifest there,
adopts it (if it describes the same segment) and removes its own objects.

The manifest is ASCII:

    kdelay-remote-segment v1
    <JSON object: the RemoteCopy fields, keys sorted>
    crc <CRC-32C of the lines before, 8 hex digits>

`objects` maps each suffix to [size, CRC-32C] of the object, as the copy verified them.
The directory keeps a copy of the committed manifest as `N.remote` (layout.REMOTE_SUFFIX):
the local record that segment N is in the store, which lets local retention delete its
other local files and lets the directory reopen without asking the store.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

import crc32c

from ...errors import CorruptLogError
from ..segments.layout import segment_name

__all__ = ["MANIFEST_SUFFIX", "RemoteCopy", "decode", "encode", "manifest_name", "object_name",
           "parse_object_name"]

MANIFEST_SUFFIX = ".manifest"
_TAG = "kdelay-remote-segment v1"
_COPY_ID = re.compile(r"^[0-9a-f]{16}$")
_OBJECT = re.compile(r"^(?P<base>\d{20})(?:\.(?P<copy>[0-9a-f]{16}))?(?P<suffix>\.[a-z]+)$")


@dataclass(frozen=True)
class RemoteCopy:
    """What a committed copy holds: enough to serve the segment without its local files
    (its offsets, size, keys for the due-order merge and retention) and to check every
    object of it."""

    base_offset: int
    next_offset: int
    copy_id: str
    size: int                      # bytes of the .log
    max_timestamp: int             # -1: no record timestamps
    min_deliver_after: int | None  # None: the segment holds no batch
    max_key: tuple[int, int] | None  # largest (deliverAfter, offset), None: no batch
    compacted: bool                # rewritten by compaction (may have offset gaps)
    objects: dict[str, tuple[int, int]] = field(default_factory=dict)  # suffix -> size, crc

    def object_name(self, suffix: str) -> str:
        return object_name(self.base_offset, self.copy_id, suffix)

    @property
    def stored_bytes(self) -> int:
        return sum(size for size, _ in self.objects.values())

    def check_object(self, suffix: str, data: bytes, where: str) -> None:
        """Raise CorruptLogError naming `where` unless `data`, the whole object `suffix` (one
        the manifest names) as read, has the size and CRC-32C recorded for it."""
        size, crc = self.objects[suffix]
        got = crc32c.crc32c(data)
        if (len(data), got) != (size, crc):
            raise CorruptLogError(f"{suffix} object has {len(data)} bytes with CRC-32C "
                                  f"{got:08x}, its manifest says {size} bytes with {crc:08x}",
                                  where)


def manifest_name(base_offset: int) -> str:
    return segment_name(base_offset) + MANIFEST_SUFFIX


def object_name(base_offset: int, copy_id: str, suffix: str) -> str:
    return f"{segment_name(base_offset)}.{copy_id}{suffix}"


def parse_object_name(name: str) -> tuple[int, str | None, str] | None:
    """(base offset, copy id or None for a manifest, suffix) of a remote object's name
    (relative to the partition), or None if it is not one of kdelay's."""
    m = _OBJECT.match(name)
    if m is None or (m["copy"] is None) != (m["suffix"] == MANIFEST_SUFFIX):
        return None
    return int(m["base"]), m["copy"], m["suffix"]


def encode(copy: RemoteCopy) -> bytes:
    fields_ = asdict(copy)
    fields_["objects"] = {k: list(v) for k, v in sorted(copy.objects.items())}
    body = f"{_TAG}\n{json.dumps(fields_, sort_keys=True, separators=(',', ':'))}\n"
    return (body + f"crc {crc32c.crc32c(body.encode('ascii')):08x}\n").encode("ascii")


def decode(raw: bytes, where: str, base_offset: int | None = None) -> RemoteCopy:
    """The RemoteCopy of a manifest's bytes. Raises CorruptLogError naming `where` if they
    are damaged (bad tag, checksum or fields), or, given the `base_offset` its name says,
    if they describe another segment (sound bytes in the wrong place are damage too)."""
    try:
        text = raw.decode("ascii")
        lines = text.split("\n")
        if len(lines) != 4 or lines[0] != _TAG or lines[3]:
            raise ValueError("not a kdelay remote-segment manifest")
        body = f"{lines[0]}\n{lines[1]}\n"
        if lines[2] != f"crc {crc32c.crc32c(body.encode('ascii')):08x}":
            raise ValueError("checksum mismatch")
        f = json.loads(lines[1])
        copy = RemoteCopy(
            base_offset=_int(f["base_offset"]), next_offset=_int(f["next_offset"]),
            copy_id=str(f["copy_id"]), size=_int(f["size"]),
            max_timestamp=int(f["max_timestamp"]),
            min_deliver_after=None if f["min_deliver_after"] is None
            else _int(f["min_deliver_after"]),
            max_key=None if f["max_key"] is None else (_int(f["max_key"][0]),
                                                       _int(f["max_key"][1])),
            compacted=bool(f["compacted"]),
            objects={str(k): (_int(v[0]), _int(v[1])) for k, v in f["objects"].items()})
        if not _COPY_ID.match(copy.copy_id) or copy.next_offset < copy.base_offset \
                or ".log" not in copy.objects or copy.objects[".log"][0] != copy.size:
            raise ValueError("inconsistent fields")
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as e:
        raise CorruptLogError(f"damaged remote-segment manifest: {e}", where) from None
    if base_offset is not None and copy.base_offset != base_offset:
        raise CorruptLogError(f"describes segment {copy.base_offset}, not segment "
                              f"{base_offset} its name says", where)
    return copy


def _int(v: object) -> int:
    if type(v) is not int or v < 0:
        raise ValueError(f"expected a non-negative integer, got {v!r}")
    return v
