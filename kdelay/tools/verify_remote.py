"""`kdelay verify DIR --remote`: check every remote copy of a partition (tiered storage).

The store is the one the directory records (`remote-storage.json`; credentials from the
environment). One listing of the partition's objects, then:

* every committed manifest (`N.manifest`) parses;
* every local `N.remote` marker has its manifest in the store, with the same bytes (a
  marker whose manifest is missing is a problem: the directory believes in a copy the
  store does not hold);
* every object a manifest names exists, with the size and CRC-32C the manifest gives (each
  read back whole);
* the copy's .log and indexes pass the checks `kdelay verify` makes of a local segment
  (CRC, offset continuity, each index against the log): they are laid out in a temporary
  directory as a partition's files and checked by the same code (verify.py,
  verify_index.py), and the messages name the remote objects;
* its `.cancelled` object holds sorted offsets of the segment;
* its `.cancellations` object (written by the sync when cancellations change after the
  copy), when there, checks out by its own CRC-32C, names this segment and holds every
  offset of `.cancelled`.

A `memory://` store vanishes with its process: there is nothing to check (a note), and
a remote-only segment recorded against one is a problem (its records are lost).

Objects no committed manifest names are orphans, reported as information, not as
problems: those of an interrupted copy, which the next sync removes (copier.orphans, the
sync's own rule), and those of a copy only the directory's marker records, which it keeps.
Every object of a segment whose manifest cannot be read stays unjudged. Only reads.
"""

from __future__ import annotations

import os
import tempfile

from ..errors import CorruptLogError, RemoteStorageError
from ..log.segments.layout import (
    COMPANION_SUFFIXES,
    LOG_SUFFIX,
    REMOTE_SUFFIX,
    SegmentFiles,
    segment_file,
)
from ..log.tiered import inventory, tier
from ..log.tiered.cancelled_object import (
    CANCELLATIONS_SUFFIX,
    CANCELLED_SUFFIX,
    decode_cancellations,
    decode_cancelled,
)
from ..log.tiered.copier import orphans, read_manifest
from ..log.tiered.manifest import (
    MANIFEST_SUFFIX,
    RemoteCopy,
    manifest_name,
    parse_object_name,
)
from ..remote.store import RemoteStore
from .scanning import DLY, OFFSET, TIME, VerifyReport, scan_segment
from .verify_batches import check_batches
from .verify_index import check_index


def check_remote(rep: VerifyReport, directory: str) -> None:
    """Add the problems of the partition's remote copies to `rep` (see the module
    docstring); counts the remote-only segments' batches, records and bytes into it. Runs
    after verify_partition made `rep` (which reports damaged `N.remote` markers)."""
    try:
        store = tier.recorded_store(directory)
    except CorruptLogError as e:
        rep.add(True, e.path or directory, None, e.reason)
        return
    except RemoteStorageError as e:  # the recorded URL or options refused
        rep.add(True, os.path.join(directory, tier.SETTINGS_FILE), None,
                f"object store unreachable: {e}")
        return
    # a damaged marker is verify's finding already (it runs first): left out here
    listed = inventory.list_all_segments(directory, damaged=[])
    markers = {s.base_offset: s.remote for s in listed if s.remote is not None}
    if store is None:
        if markers:
            rep.add(True, os.path.join(directory, tier.SETTINGS_FILE), None,
                    f"missing: {len(markers)} segments are marked as copied to an object "
                    f"store, but the directory does not say which")
        else:
            rep.add(False, directory, None, "no tiered storage (no remote-storage.json)")
        return
    if store.volatile:  # its copies vanished with the process that made them
        rep.add(False, store.describe(""), None, "the object store vanishes with its "
                "process (memory://): there is no copy to check; the local files are kept")
        if any(s.remote_only for s in listed):
            rep.add(True, store.describe(""), None, "segments held only in a store that "
                    "vanishes with its process: their records are lost")
        return
    try:
        listing = store.list()
    except RemoteStorageError as e:
        rep.add(True, store.describe(""), None, f"object store unreachable: {e}")
        return
    manifests = _manifests(rep, store, listing)
    committed = {base: copy for base, copy in manifests.items() if copy is not None}
    for base, marker in sorted(markers.items()):
        path = segment_file(directory, base, REMOTE_SUFFIX)
        copy = committed.get(base)
        if copy is None:
            rep.add(True, path, None, f"the store has no committed copy of this segment "
                                      f"({store.describe(manifest_name(base))} is missing)")
        elif copy != marker:
            rep.add(True, path, None, f"differs from the store's manifest (copy "
                                      f"{marker.copy_id} here, {copy.copy_id} there)")
    copy_ids = {base: None if copy is None else copy.copy_id for base, copy in manifests.items()}
    unnamed = set(orphans(listing, copy_ids))
    # the sync's sweep also keeps the objects of every copy the directory's markers record
    swept = set(orphans(listing, {**copy_ids, **{b: m.copy_id for b, m in markers.items()}}))
    for name in sorted(listing):
        if parse_object_name(name) is None:
            rep.add(False, store.describe(name), None, "not an object of kdelay's")
        elif name in unnamed:
            rep.add(False, store.describe(name), None, "orphan: no committed manifest names "
                    "it " + ("(an interrupted copy left it; the next sync removes it)"
                             if name in swept else
                             "(the directory's marker does: a sync keeps it)"))
    local = {s.base_offset for s in listed if not s.remote_only}
    for base, copy in sorted(committed.items()):
        _check_copy(rep, store, listing, copy, counted=base not in local)
    rep.remote_copies += len(committed)


def _manifests(rep: VerifyReport, store: RemoteStore, listing: dict[str, int]
               ) -> dict[int, RemoteCopy | None]:
    """base -> the committed copy of every manifest in the listing; None (a problem
    added) for one that is damaged or cannot be read."""
    out: dict[int, RemoteCopy | None] = {}
    for name in sorted(listing):
        parsed = parse_object_name(name)
        if parsed is None or parsed[2] != MANIFEST_SUFFIX:
            continue
        try:
            out[parsed[0]] = read_manifest(store, parsed[0])
        except CorruptLogError as e:
            rep.add(True, e.path or store.describe(name), None, e.reason)
            out[parsed[0]] = None
        except RemoteStorageError as e:
            rep.add(True, store.describe(name), None, str(e))
            out[parsed[0]] = None
    return out


def _check_copy(rep: VerifyReport, store: RemoteStore, listing: dict[str, int],
                copy: RemoteCopy, *, counted: bool) -> None:
    """Every object of one committed copy: there, of its size and CRC, and (the .log and
    indexes) sound by verify's own checks. `counted`: the segment is remote-only, so its
    batches count into the report's totals."""
    with tempfile.TemporaryDirectory(prefix="kdelay-verify-remote-") as tmp:
        names: dict[str, str] = {}  # temporary path -> the object's full name
        damaged: set[str] = set()  # suffixes of objects that differ from the manifest
        for suffix in sorted(copy.objects):
            name = copy.object_name(suffix)
            where = store.describe(name)
            if name not in listing:
                rep.add(True, where, None, "missing (its manifest names it)")
                continue
            try:
                data = store.get(name)
            except RemoteStorageError as e:
                rep.add(True, where, None, str(e))
                continue
            try:
                copy.check_object(suffix, data, where)
            except CorruptLogError as e:  # truncated, replaced or damaged
                damaged.add(suffix)
                rep.add(True, where, None, e.reason)
            if suffix == CANCELLED_SUFFIX:
                _check_cancelled(rep, where, data, copy)
            elif suffix == LOG_SUFFIX or suffix in COMPANION_SUFFIXES:
                path = segment_file(tmp, copy.base_offset, suffix)
                with open(path, "wb") as f:
                    f.write(data)
                names[path] = where
        _check_cancellations(rep, store, listing, copy)
        log_path = segment_file(tmp, copy.base_offset, LOG_SUFFIX)
        if log_path in names:  # as long as its manifest says: a truncated one reads short
            _check_segment(rep, SegmentFiles(tmp, copy.base_offset, copy.size), copy, names,
                           counted, indexes=LOG_SUFFIX not in damaged)


def _check_segment(rep: VerifyReport, seg: SegmentFiles, copy: RemoteCopy,
                   names: dict[str, str], counted: bool, *, indexes: bool) -> None:
    """verify's per-segment checks over the copy laid out in a temporary directory; their
    findings name the remote objects. Without `indexes` (the .log differs from what its
    manifest says, so the indexes made from it cannot agree) they are not compared."""
    local = VerifyReport(seg.directory)
    scan = scan_segment(seg)
    check_batches(local, seg, scan, False, True)  # a sealed segment: nothing in flight
    for kind in (DLY, OFFSET, TIME) if indexes else ():
        check_index(local, seg, scan, kind, False, True)
    if not scan.breaks and scan.next_offset() != copy.next_offset:
        local.add(True, seg.log_path, None, f"ends before offset {scan.next_offset()}, its "
                                            f"manifest says {copy.next_offset}")
    for f in local.findings:
        rep.add(f.problem, names.get(f.path, f.path), f.position, f.message)
    if counted:
        rep.segments += 1
        rep.batches += len(scan.batches)
        rep.records += scan.records
        rep.bytes += seg.log_size
    rep.indexes_checked += local.indexes_checked


def _check_cancelled(rep: VerifyReport, where: str, data: bytes, copy: RemoteCopy) -> None:
    """The `.cancelled` object decodes as offsets of the segment (cancelled_object.py)."""
    try:
        decode_cancelled(data, copy.base_offset, copy.next_offset, where)
    except CorruptLogError as e:
        rep.add(True, where, None, e.reason)


def _check_cancellations(rep: VerifyReport, store: RemoteStore, listing: dict[str, int],
                         copy: RemoteCopy) -> None:
    """The `.cancellations` object the sync keeps beside a copy, when there: whole, of this
    segment (its own CRC-32C, base, end and count), and holding every offset of the
    copy's `.cancelled` (cancellations only grow)."""
    name = copy.object_name(CANCELLATIONS_SUFFIX)
    if name not in listing:
        return
    where = store.describe(name)
    try:
        offsets = decode_cancellations(store.get(name), copy.base_offset, copy.next_offset,
                                       where)
        if CANCELLED_SUFFIX in copy.objects:
            older = decode_cancelled(store.get(copy.object_name(CANCELLED_SUFFIX)),
                                     copy.base_offset, copy.next_offset, where)
            lost = set(older.tolist()) - set(offsets.tolist())
            if lost:
                rep.add(True, where, None, f"lacks {len(lost)} offsets its copy's .cancelled "
                                           f"holds (first {min(lost)})")
    except CorruptLogError as e:
        rep.add(True, where, None, e.reason)
    except RemoteStorageError as e:
        rep.add(True, where, None, str(e))
