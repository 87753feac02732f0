"""The copy protocol: one sealed segment into the object store, verified, then committed.

`copy_segment` runs outside the Log's lock (appends go on): the caller picks the segment
and snapshots its cancelled offsets under the lock, and publishes the result
(`seg.remote = copy`) under it again. Steps, each a crash point:

1. upload the attempt's objects under a fresh copy id: the `.log` from its file (sent in
   parts when large), the three indexes as the segment holds them (encoded from memory, so
   never a stale file), `.compacted` and `.cancelled` when there are any;
2. verify every object: its size as the store reports it, and its CRC-32C read back from
   the store against the one computed locally;
3. commit: create `N.manifest` conditionally. If one is there already (an earlier attempt
   committed and crashed before step 4), adopt it when it describes this very segment
   (base, end, size and the .log's CRC) and remove this attempt's objects; else refuse;
4. write the manifest's bytes to `N.remote` in the directory (atomically).

Whatever an attempt left without a manifest is an orphan: `sweep_orphans` removes it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence

import crc32c
import numpy as np

from ... import fsio
from ...errors import CorruptLogError, RemoteStorageError
from ...remote.store import ObjectExistsError, RemoteStore
from ..segments.layout import (
    DLYINDEX_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MARKER_SUFFIX,
    TIMEINDEX_SUFFIX,
)
from ..segments.segment import LogSegment
from .cancelled_object import CANCELLED_SUFFIX, encode_cancelled
from .manifest import (
    MANIFEST_SUFFIX,
    RemoteCopy,
    decode,
    encode,
    manifest_name,
    parse_object_name,
)
from .remote_marker import write_remote_marker
from .tier import RemoteTier

__all__ = ["copy_segment", "file_crc", "orphans", "read_manifest", "sweep_orphans"]

# the .log is read back (to check its CRC) and hashed locally in pieces of this size
_CHUNK = 8 << 20


def file_crc(path: str) -> int:
    """CRC-32C of a whole file, read in pieces."""
    crc = 0
    with open(path, "rb") as f:
        while piece := f.read(_CHUNK):
            crc = crc32c.crc32c(piece, crc)
    return crc


def copy_segment(tier: RemoteTier, seg: LogSegment, cancelled: Sequence[int] | np.ndarray
                 ) -> RemoteCopy:
    """Copy the sealed segment `seg` (with the `cancelled` offsets snapshot under the lock)
    and commit it; returns the committed copy: this attempt's, or an earlier committed copy
    of the same segment, adopted. `N.remote` is written; setting `seg.remote` is the
    caller's (under the lock). Raises RemoteStorageError; a failed attempt's objects are
    removed when the store lets us (else a later sweep does)."""
    store = tier.store
    copy_id = os.urandom(8).hex()  # (not `secrets`: it loads OpenSSL, 3 MiB per process)
    log_crc = file_crc(seg.log_path)
    payloads = _payloads(seg, cancelled)
    objects = {LOG_SUFFIX: (seg.size, log_crc)}
    objects.update({suffix: (len(data), crc32c.crc32c(data))
                    for suffix, data in payloads.items()})
    key = seg.dly_index.max_key()
    copy = RemoteCopy(base_offset=seg.base_offset, next_offset=seg.next_offset,
                      copy_id=copy_id, size=seg.size, max_timestamp=seg.max_timestamp,
                      min_deliver_after=seg.dly_index.min_deliver_after(),
                      max_key=None if key is None else (int(key[0]), int(key[1])),
                      compacted=seg.compacted, objects=objects)
    names = [copy.object_name(suffix) for suffix in objects]
    try:
        store.put(copy.object_name(LOG_SUFFIX), seg.log_path)
        for suffix, data in payloads.items():
            store.put(copy.object_name(suffix), data)
        for suffix, (size, crc) in objects.items():
            _verify(store, copy.object_name(suffix), size, crc)
        committed = _commit(store, copy, log_crc)
    except Exception:  # (a crash, a BaseException, leaves them to the sweep)
        _delete_quietly(store, names)
        raise
    if committed is not copy:
        _delete_quietly(store, names)
    write_remote_marker(seg.directory, committed)
    return committed


def _payloads(seg: LogSegment, cancelled) -> dict[str, bytes]:
    """Every object of the copy but the .log, by suffix."""
    kw = {"log_bytes": seg.size, "next_offset": seg.next_offset}
    out = {INDEX_SUFFIX: seg.offset_index.encoded(**kw),
           TIMEINDEX_SUFFIX: seg.time_index.encoded(**kw),
           DLYINDEX_SUFFIX: seg.dly_index.encoded(**kw)}
    if seg.compacted:
        marker = fsio.read_small(seg.path(MARKER_SUFFIX))
        if marker is None:
            raise RemoteStorageError(f"{seg.path(MARKER_SUFFIX)}: compaction marker missing")
        out[MARKER_SUFFIX] = marker
    if len(cancelled):
        out[CANCELLED_SUFFIX] = encode_cancelled(cancelled)
    return out


def _verify(store: RemoteStore, name: str, size: int, crc: int) -> None:
    """The object is there with `size` bytes and CRC-32C `crc`, read back from the store."""
    found = store.size(name)
    if found != size:
        raise RemoteStorageError(f"copy of {store.describe(name)} has "
                                 f"{'no object' if found is None else f'{found} bytes'}, "
                                 f"expected {size}")
    got = 0
    for start in range(0, size, _CHUNK):
        got = crc32c.crc32c(store.get_ranges(name, [start], [min(size, start + _CHUNK)])[0],
                            got)
    if got != crc:
        raise RemoteStorageError(f"copy of {store.describe(name)} reads back with CRC-32C "
                                 f"{got:08x}, expected {crc:08x}")


def _commit(store: RemoteStore, copy: RemoteCopy, log_crc: int) -> RemoteCopy:
    """Create the manifest; if an earlier attempt committed one for this same segment,
    that copy (the caller removes this attempt's objects)."""
    name = manifest_name(copy.base_offset)
    try:
        store.put(name, encode(copy), create=True)
        return copy
    except ObjectExistsError:
        pass
    try:
        earlier = decode(store.get(name), store.describe(name), copy.base_offset)
    except CorruptLogError as e:
        raise RemoteStorageError(f"cannot commit the copy of segment {copy.base_offset}: "
                                 f"{e}") from e
    if (earlier.base_offset, earlier.next_offset, earlier.size,
            earlier.objects[LOG_SUFFIX][1]) != (copy.base_offset, copy.next_offset, copy.size,
                                                log_crc):
        raise RemoteStorageError(f"{store.describe(name)} describes another segment "
                                 f"(offsets {earlier.base_offset}..{earlier.next_offset}, "
                                 f"{earlier.size} bytes) than the local one "
                                 f"({copy.base_offset}..{copy.next_offset}, {copy.size} bytes)")
    return earlier


def _delete_quietly(store: RemoteStore, names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(RemoteStorageError):
            store.delete(name)


def read_manifest(store: RemoteStore, base: int) -> RemoteCopy:
    """The copy of segment `base` that its manifest in the store commits. Raises
    CorruptLogError naming the manifest if it is damaged or describes another segment,
    RemoteStorageError (ObjectMissingError: there is none)."""
    name = manifest_name(base)
    return decode(store.get(name), store.describe(name), base)


def orphans(names: Iterable[str], committed: Mapping[int, str | None]) -> list[str]:
    """The objects among `names` (a listing of the store) that no committed copy names,
    sorted: `committed` maps each segment with a manifest to its copy id, or to None when
    the manifest cannot be read (its copy id unknown, every object of the segment stays
    for verify to report). Manifests and names not kdelay's are never orphans."""
    out = []
    for name in sorted(names):
        parsed = parse_object_name(name)
        if parsed is None or parsed[1] is None:
            continue  # not kdelay's, or a manifest
        base, copy_id, _ = parsed
        if base not in committed or committed[base] not in (copy_id, None):
            out.append(name)
    return out


def sweep_orphans(store: RemoteStore, listing: dict[str, int], known: dict[int, str]
                  ) -> int:
    """Delete every object that no committed manifest names: what interrupted copies left.
    `listing` is the store's (`store.list()`), `known` maps base offsets to the copy ids of
    the manifests the directory already holds (`N.remote`); any other manifest listed is
    read to learn its copy id. Call only while no copy is in flight. Returns how many
    objects were deleted."""
    committed: dict[int, str | None] = dict(known)
    for name in listing:
        parsed = parse_object_name(name)
        if parsed is not None and parsed[2] == MANIFEST_SUFFIX and parsed[0] not in committed:
            try:
                committed[parsed[0]] = read_manifest(store, parsed[0]).copy_id
            except CorruptLogError:
                committed[parsed[0]] = None  # damaged: its objects stay (see orphans)
    doomed = orphans(listing, committed)
    for name in doomed:
        store.delete(name)
    return len(doomed)
