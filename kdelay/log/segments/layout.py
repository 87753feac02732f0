"""File names and the directory inventory: the one module that names a segment's files,
lists a partition directory, finds partition directories under a root, and says which
files are leftovers.

Layout of a partition directory (as in Kafka):

    <base offset, 20 digits>.log        the segment's batches
    <base offset>.index                 sparse offset index
    <base offset>.timeindex             sparse time index
    <base offset>.dlyindex              DeliverAfterIndex (one entry per batch)
    <base offset>.compacted             marker of a segment rewritten by compaction
    <base offset>.<suffix>.cleaned/.swap  a compaction's replacement being written/swapped in
    <base offset>.cancels, .cancelindex   cancelled records: journal and sorted cache (only
                                        for a segment with cancellations)
    .lock, .kdelay_cleanshutdown, recovery-point-offset-checkpoint
    groups/positions.journal            consumer groups' commits (kdelay.groups.positions)
    append.horizon                      the live writer's state for lock-free readers
    <base offset>.remote                the segment is in the object store (tiered storage);
                                        .remote-deleting while its copy is being deleted
    remote-storage.json                 the object store's URL and options, secrets left out
    remote-cache/                       remote segments' indexes and byte ranges, cached
    queues/<group>.snapshot, .journal   queue group state (kdelay.groups.queue.state_store)
    *.tmp, *.deleted                    leftovers of an interrupted atomic write or deletion

A topic root holds one `<topic>-<partition>` directory per partition (Kafka's naming).
Listing a directory costs one `listdir`; nothing here reads file contents.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
DLYINDEX_SUFFIX = ".dlyindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, DLYINDEX_SUFFIX)
# a segment's cancellations (kdelay/log/cancellation/journal.py): journal, and its sorted cache
CANCELS_SUFFIX = ".cancels"
CANCEL_INDEX_SUFFIX = ".cancelindex"
CANCEL_SUFFIXES = (CANCELS_SUFFIX, CANCEL_INDEX_SUFFIX)
# compaction (log/compaction/swap.py): the marker of a compacted segment, and the suffixes a
# replacement carries while it is written and while it is swapped in (the loader completes
# or undoes a swap before it lists segments)
MARKER_SUFFIX = ".compacted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# tiered storage (kdelay/log/tiered/): the local copy of a committed remote copy's manifest
# (the segment is in the object store; its .log and indexes may be gone locally), and the
# same file renamed while the remote copy is being deleted (retention of the whole log)
REMOTE_SUFFIX = ".remote"
REMOTE_DELETING_SUFFIX = ".remote-deleting"
# files that belong to a segment besides its .log: removed with it, orphans without it
COMPANION_SUFFIXES = (*INDEX_SUFFIXES, MARKER_SUFFIX, *CANCEL_SUFFIXES)
# an interrupted atomic write leaves `.tmp`, an interrupted delete `.deleted`
TEMP_SUFFIXES = (".tmp", ".deleted")
# kdelay's own small files: their presence alone marks a partition directory
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kdelay_cleanshutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
HORIZON_FILE = "append.horizon"  # see kdelay/log/segments/append_horizon.py
_MARKERS = (LOCK_FILE, CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE)
# the suffixes `classify` sorts a listing by
_SEGMENT_SUFFIXES = frozenset((LOG_SUFFIX, REMOTE_SUFFIX, REMOTE_DELETING_SUFFIX,
                               *COMPANION_SUFFIXES))
_PARTITION_NAME = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)$")


# ---------------------------------------------------------------------------- names


def segment_name(base_offset: int) -> str:
    """Kafka's naming: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


def segment_file(directory: str, base_offset: int, suffix: str) -> str:
    """The path of one of a segment's files, e.g. `segment_file(d, 0, LOG_SUFFIX)` (as
    os.path.join makes it, without its cost: an open builds one per segment)."""
    if not directory or directory.endswith(os.sep):
        return f"{directory}{base_offset:020d}{suffix}"
    return f"{directory}{os.sep}{base_offset:020d}{suffix}"


def parse_segment_name(filename: str) -> tuple[int, str] | None:
    """(base offset, suffix) of a segment file name, or None if it is not one."""
    stem, dot, suffix = filename.partition(".")
    if not dot or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem), "." + suffix


def parse_partition_name(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a Kafka-style `<topic>-<n>` directory name, or None."""
    m = _PARTITION_NAME.match(name)
    return None if m is None else (m["topic"], int(m["partition"]))


# ---------------------------------------------------------------------------- segments


@dataclass(frozen=True)
class SegmentFiles:
    """One segment on disk: its directory, base offset and the .log's size when listed."""

    directory: str
    base_offset: int
    log_size: int

    def path(self, suffix: str) -> str:
        return segment_file(self.directory, self.base_offset, suffix)

    @property
    def log_path(self) -> str:
        return self.path(LOG_SUFFIX)


def is_temporary(name: str) -> bool:
    """A leftover of an interrupted atomic write or deletion."""
    return name.endswith(TEMP_SUFFIXES)


@dataclass(frozen=True)
class Listing:
    """A partition directory's segments and leftovers as one listing shows them (`classify`).
    Every reader of a directory, the loader and the offline ones alike, takes its segments
    from here, so they agree on which exist."""

    local: list[int]         # segments with a .log, ascending
    remote_only: list[int]   # held only in the object store (`N.remote` alone), ascending
    copied: frozenset[int]   # segments with `N.remote`: a committed copy (local or not)
    deleting: list[int]      # no longer in the log: their remote copies are being deleted
    leftovers: list[str]     # names the next open removes, in name order
    # bases of the segments that have a compaction marker or a cancellation file, by
    # suffix (an open asks here rather than looking for each segment's files one by one)
    companions: dict[str, frozenset[int]] = field(default_factory=dict)

    def has(self, base: int, suffix: str) -> bool:
        """Does local segment `base` have its `suffix` file?"""
        return base in self.companions.get(suffix, ())

    @property
    def bases(self) -> list[int]:
        """Every segment of the log, local or remote-only, ascending."""
        return sorted([*self.local, *self.remote_only])


def classify(names: list[str]) -> Listing:
    """The segments and leftovers of a directory listing. Leftovers are temporary files and
    index files (or compaction markers) whose .log is gone: the next open removes them. A
    remote-only segment keeps its cancellation files; a segment whose remote copy is being
    deleted (`N.remote-deleting`) is no longer in the log: its .log and every companion
    are leftovers (the marker itself is left to the deletion to finish).
    O(n log n) in the number of names."""
    stems = _stems_by_suffix(names)

    def by_base(suffix: str) -> dict[int, str]:
        return {int(stem): stem for stem in stems.get(suffix, ()) if stem.isdigit()}

    logs, remote = by_base(LOG_SUFFIX), by_base(REMOTE_SUFFIX)
    deleting = by_base(REMOTE_DELETING_SUFFIX).keys()
    bases = logs.keys() - deleting
    remote_only = remote.keys() - bases - deleting
    # companions are matched to their .log by name (no int per index file)
    local_stems = {logs[b] for b in bases}
    remote_stems = {remote[b] for b in remote_only}
    leftovers = [n for n in names if n.endswith(TEMP_SUFFIXES)]
    kept: dict[str, frozenset[int]] = {}
    for suffix in COMPANION_SUFFIXES:
        found = stems.get(suffix)
        if not found:
            continue
        keep = found & local_stems
        if suffix in CANCEL_SUFFIXES:
            keep |= found & remote_stems
        leftovers += [stem + suffix for stem in found - keep if stem.isdigit()]
        if suffix not in INDEX_SUFFIXES:
            kept[suffix] = frozenset(map(int, keep))
    leftovers += [logs[b] + LOG_SUFFIX for b in deleting & logs.keys()]
    return Listing(sorted(bases), sorted(remote_only), frozenset(remote.keys() - deleting),
                   sorted(deleting), sorted(leftovers), kept)


def _stems_by_suffix(names: list[str]) -> dict[str, set[str]]:
    """The segment files of a listing by suffix, as their 20-character stems (a segment
    file's name is its base offset, zero-padded to 20 digits, then the suffix from the
    first dot on: parse_segment_name; the caller keeps the stems that are digits). One
    pass over the names."""
    stems: dict[str, set[str]] = {}
    for name in names:
        if len(name) > 20 and name[20] == ".":
            stems.setdefault(name[20:], set()).add(name[:20])
    return {suffix: found for suffix, found in stems.items() if suffix in _SEGMENT_SUFFIXES}


def remote_deletions(directory: str) -> list[int]:
    """Base offsets of the segments whose remote copies are being deleted (a
    `N.remote-deleting` marker), ascending."""
    return classify_directory(directory).deleting


def compaction_in_progress(names: list[str]) -> list[str]:
    """Names of a compaction's `.cleaned`/`.swap` files in a directory listing, sorted."""
    return sorted(n for n in names
                  if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)) and parse_segment_name(n))


def classify_directory(directory: str) -> Listing:
    """`classify` of the directory's listing. Raises OSError."""
    return classify(os.listdir(directory))


def segment_bases(directory: str) -> list[int]:
    """The base offsets of the directory's local segments (one per .log), ascending."""
    return classify_directory(directory).local


def leftover_files(directory: str) -> list[str]:
    """Names of the directory's leftovers (see `classify`), sorted."""
    return classify_directory(directory).leftovers


def list_segments(directory: str) -> list[SegmentFiles]:
    """The directory's segments in offset order, with their .log sizes; a segment deleted
    while listing (retention) is left out. Raises OSError if the directory is unreadable."""
    out = []
    for base in segment_bases(directory):
        try:
            size = os.path.getsize(segment_file(directory, base, LOG_SUFFIX))
        except FileNotFoundError:
            continue
        out.append(SegmentFiles(directory, base, size))
    return out


# ---------------------------------------------------------------------------- partitions


@dataclass(frozen=True)
class PartitionDir:
    """A partition directory; `topic`/`partition` come from a `<topic>-<n>` name under a
    topic root (None for a directory given directly)."""

    path: str
    topic: str | None = None
    partition: int | None = None


def is_partition_dir(path: str) -> bool:
    """Does `path` look like a partition directory (segment files or kdelay's own files)?"""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(n in _MARKERS or parse_segment_name(n) is not None for n in names)


def find_partitions(root: str) -> tuple[bool, list[PartitionDir]]:
    """(found under a root?, partition directories). `root` itself when it is a partition
    directory; else its subdirectories that are partition directories or carry a
    `<topic>-<n>` name, in name order (an empty list when there are none).
    Raises OSError when `root` cannot be listed."""
    if is_partition_dir(root):
        return False, [PartitionDir(root)]
    found = []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if not os.path.isdir(full):
            continue
        parsed = parse_partition_name(name)
        if parsed is not None:
            found.append(PartitionDir(full, *parsed))
        elif is_partition_dir(full):
            found.append(PartitionDir(full))
    return True, found
