"""The compacted-segment marker and the crash-safe swap that installs a rewritten segment.

Compaction (compaction.py) writes a segment's replacement next to it under `.cleaned`
names, then swaps it in as Kafka's LogCleaner does. A crash at any moment leaves either
the old segment(s) or the new one, never neither and never both; `recover` (run by the
loader before anything else reads the directory) completes or rolls back an interrupted
swap.

Files of a replacement for the segments [base, end) (one or several adjacent segments
merged into one named `base`):

    <base>.log.cleaned  <base>.index.cleaned  <base>.timeindex.cleaned
    <base>.dlyindex.cleaned  <base>.compacted.cleaned          being written (all fsync'd)
    ... the same names ending `.swap`                         committed, being installed

The protocol (`install`), each step through kdelay.fsio:

1. every `.cleaned` file is renamed to `.swap`, the `.log` last; then the directory is
   fsync'd. The `.log.swap` rename is the commit point: before it, the replacement does not
   exist (recovery deletes any `.cleaned`/`.swap` file of `base`); from it on, it is the
   segment (recovery finishes the swap).
2. the `.log` of every replaced segment other than `base` is deleted (their indexes and
   markers, orphans from then on, are removed after the swap, or by the next open).
3. every `.swap` is renamed over its final name, the `.log` last; the directory is fsync'd.

`recover` repeats steps 2-3 for every `base` that has a `.log.swap` (the end offset comes from
the marker; if the marker is unreadable, from the new indexes' headers; if those are
unreadable too, from the rewritten log itself, which is safe: a segment kept that way held
no surviving record), and removes every other `.cleaned` or `.swap` file.

The marker `<base>.compacted` says that the segment was rewritten by compaction, so gaps in
its offsets are expected (`kdelay verify` treats a gap anywhere else as damage), and which
offsets it covers: its records lie in [base, end), and the next segment starts at `end`
(the last batches of a compacted segment may be gone, so a scan of the .log cannot tell).
It also keeps a checksum of the segment's batch base offsets (walker.base_offsets_crc): a
batch's CRC does not cover its base offset, so where gaps are allowed a damaged one could
pass for a gap when the indexes are rebuilt from the .log. Format, ASCII, three or four lines:

    kdelay-compacted v1
    <base> <end>
    bases <CRC-32C of the base offsets, 8 hex digits>      (absent in a rewritten marker)
    crc <CRC-32C of the lines before, 8 hex digits>
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import NamedTuple

import crc32c

from ... import fsio
from ...errors import CorruptLogError, IndexFileError
from ...index.deliver_after_index import DeliverAfterIndex
from ...index.index_file import read_meta
from ...index.offset_index import OffsetIndex
from ...index.time_index import TimeIndex
from ..batch import codec
from ..segments.layout import (
    CLEANED_SUFFIX,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    MARKER_SUFFIX,
    SWAP_SUFFIX,
    parse_segment_name,
    segment_file,
)

CLEANED = CLEANED_SUFFIX
SWAP = SWAP_SUFFIX
# every file a segment may have; the .log is installed last, so it comes last here
SEGMENT_SUFFIXES = (*INDEX_SUFFIXES, MARKER_SUFFIX, LOG_SUFFIX)
_MARKER_TAG = "kdelay-compacted v1"


class Marker(NamedTuple):
    base_offset: int
    end_offset: int  # the next segment's base: records of this one lie in [base, end)
    bases_crc: int | None = None  # walker.base_offsets_crc of its batches (None: not known)


def encode_marker(marker: Marker) -> bytes:
    body = f"{_MARKER_TAG}\n{marker.base_offset} {marker.end_offset}\n"
    if marker.bases_crc is not None:
        body += f"bases {marker.bases_crc:08x}\n"
    return (body + f"crc {crc32c.crc32c(body.encode('ascii')):08x}\n").encode("ascii")


def decode_marker(raw: bytes, base_offset: int) -> Marker | None:
    """The marker in `raw`, or None if it is damaged or names another segment."""
    try:
        lines = raw.decode("ascii").split("\n")
        if len(lines) not in (4, 5) or lines[-1] or lines[0] != _MARKER_TAG:
            return None
        body = "".join(line + "\n" for line in lines[:-2])
        if lines[-2] != f"crc {crc32c.crc32c(body.encode()):08x}":
            return None
        base, end = (int(x) for x in lines[1].split(" "))
        bases_crc = None
        if len(lines) == 5:
            word, value = lines[2].split(" ")
            if word != "bases" or len(value) != 8:
                return None
            bases_crc = int(value, 16)
    except (UnicodeDecodeError, ValueError):
        return None
    if base != base_offset or end < base:
        return None
    return Marker(base, end, bases_crc)


def read_marker(directory: str, base_offset: int, suffix: str = "") -> Marker | None:
    """The segment's marker (None: never compacted, or the marker is damaged)."""
    raw = fsio.read_small(segment_file(directory, base_offset, MARKER_SUFFIX + suffix))
    return None if raw is None else decode_marker(raw, base_offset)


def marker_exists(directory: str, base_offset: int) -> bool:
    return os.path.exists(segment_file(directory, base_offset, MARKER_SUFFIX))


def cleaned_path(directory: str, base_offset: int, suffix: str) -> str:
    return segment_file(directory, base_offset, suffix + CLEANED)


def install(directory: str, base_offset: int, replaced: Iterable[int]) -> list[int]:
    """Swap the `.cleaned` files of `base_offset` in for the segments `replaced` (base
    offsets, `base_offset` among them): steps 1-3 of the protocol above. Step 2 removes
    only the other segments' .log files (what makes them segments); their indexes and
    markers are left for `remove_companions`, which the caller may run later, outside
    its lock (orphans are harmless: the loader removes any it finds). Returns the other
    replaced bases."""
    for suffix in SEGMENT_SUFFIXES:  # step 1; the .log rename commits
        fsio.rename(cleaned_path(directory, base_offset, suffix),
                    segment_file(directory, base_offset, suffix + SWAP))
    fsio.fsync_dir(directory)
    others = [b for b in replaced if b != base_offset]
    _finish(directory, base_offset, others)
    return others


def _finish(directory: str, base_offset: int, others: Iterable[int]) -> None:
    """Steps 2 and 3: delete the other replaced segments' .log files, then rename the swaps
    into place."""
    for other in others:
        fsio.unlink(segment_file(directory, other, LOG_SUFFIX))
    for suffix in SEGMENT_SUFFIXES:
        swap = segment_file(directory, base_offset, suffix + SWAP)
        if os.path.exists(swap):  # recovery: an earlier attempt may have moved some
            fsio.rename(swap, segment_file(directory, base_offset, suffix))
    fsio.fsync_dir(directory)


def remove_companions(directory: str, bases: Iterable[int]) -> None:
    """Remove the indexes and markers of segments whose .log is gone."""
    for base in bases:
        for suffix in (*INDEX_SUFFIXES, MARKER_SUFFIX):
            fsio.unlink(segment_file(directory, base, suffix))


def discard_cleaned(directory: str, base_offset: int) -> None:
    """Remove the `.cleaned` files of an abandoned rewrite (nothing was committed)."""
    for suffix in SEGMENT_SUFFIXES:
        fsio.unlink(cleaned_path(directory, base_offset, suffix))
        fsio.unlink(cleaned_path(directory, base_offset, suffix) + ".tmp")


def recover(directory: str) -> list[str]:
    """Complete every committed swap and roll back every uncommitted one (see the module
    docstring); returns what it did, one line per swap, for the load report. O(files in
    the directory) plus, only for a swap whose marker is damaged, a scan of its .log."""
    names = os.listdir(directory)
    committed: set[int] = set()
    stray: list[tuple[str, int, str]] = []  # (name, base, suffix)
    for name in names:
        if not (name.endswith(CLEANED) or name.endswith(SWAP)):
            continue
        parsed = parse_segment_name(name)
        if parsed is None:
            continue
        base, suffix = parsed
        if suffix == LOG_SUFFIX + SWAP:
            committed.add(base)
        else:
            stray.append((name, base, suffix))
    notes = []
    for name, base, suffix in stray:  # rollback: uncommitted rewrites, swaps not committed
        if suffix.endswith(CLEANED) or base not in committed:
            fsio.unlink(os.path.join(directory, name))
    if stray:
        fsio.fsync_dir(directory)
    for base in sorted(committed):
        end, how = _swap_end(directory, base)
        bases = _segment_bases(directory)
        others = [b for b in bases if base < b < end]
        _finish(directory, base, others)
        remove_companions(directory, others)
        if how != "marker":
            # the marker was unreadable: install a correct one for the loader and verify
            fsio.atomic_write(segment_file(directory, base, MARKER_SUFFIX),
                              encode_marker(Marker(base, end)))
        notes.append(f"completed the interrupted compaction of segment {base} "
                     f"(replacing {len(others) + 1} segment(s); end offset from {how})")
    rolled = {base for _, base, _ in stray} - committed
    notes += [f"rolled back an uncommitted compaction of segment {b}" for b in sorted(rolled)]
    return notes


def _swap_end(directory: str, base: int) -> tuple[int, str]:
    """The end offset of a committed swap: from its marker (still `.swap`, or already
    renamed: step 3 moves the marker before the .log), else from its log."""
    for suffix in (SWAP, ""):
        marker = read_marker(directory, base, suffix)
        if marker is not None:
            return marker.end_offset, "marker"
    # the new indexes hold the same end offset in their checksummed headers
    for suffix, index in zip(INDEX_SUFFIXES, (OffsetIndex, TimeIndex, DeliverAfterIndex),
                             strict=True):
        path = segment_file(directory, base, suffix + SWAP)
        if not os.path.exists(path):  # step 3 renamed it already
            path = segment_file(directory, base, suffix)
        try:
            meta, _ = read_meta(path, index.MAGIC)
        except IndexFileError:
            continue
        if meta.base_offset == base:
            return meta.next_offset, "index header"
    # Every surviving record of each replaced segment is in the new log, so a replaced
    # segment starting after the new log's last offset held no survivor: keeping it
    # (it then ends the merged range) loses nothing and duplicates nothing.
    last = _last_offset(segment_file(directory, base, LOG_SUFFIX + SWAP), base)
    later = [b for b in _segment_bases(directory) if b > max(base, last)]
    return (min(later) if later else last + 1), "log scan"


def _last_offset(path: str, base: int) -> int:
    """The last offset of the intact batches at the start of a .log of segment `base`
    (base - 1 if none), reading batch headers only."""
    last = base - 1
    fd = fsio.open_read(path)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            head = fsio.pread(fd, codec.HEADER_SIZE, pos)
            try:
                h = codec.parse_header(head, available=size - pos)
            except CorruptLogError:
                break
            last = max(last, h.last_offset)
            pos += h.size
    finally:
        os.close(fd)
    return last


def _segment_bases(directory: str) -> list[int]:
    out = []
    for name in os.listdir(directory):
        parsed = parse_segment_name(name)
        if parsed is not None and parsed[1] == LOG_SUFFIX:
            out.append(parsed[0])
    return sorted(out)
