"""The durable state of one queue group on one partition: a snapshot plus a delta journal.

What is stored (Kafka's share-partition state, with a delay per released record):

- the *cursor*: a DeliveryKey in the log's due order. Every record at or before it has been
  acquired by the group at least once and is either finished (acked or rejected) or in the
  in-flight set; nothing after it has been delivered yet;
- the *in-flight set*: offset -> (delivery count, available-at time). The time is where the
  record sits in the group's order when it is next offered: its deliverAfter, or the time a
  release made it available again;
- two counters, acked and rejected, for metrics.

Records that are acquired when the process dies are not locked by anybody after a restart:
they are offered again at their available-at time, with their count. So a lock needs no
storage, and the state is O(records in flight), never O(log).

Files, in `<partition dir>/queues/`: `<group>.snapshot` (replaced atomically) and
`<group>.journal` (append-only deltas); their bytes are described in `state_format`. A
journal applies to the snapshot of the same generation. Compaction, once the journal
outgrows twice a snapshot of the in-flight set, writes snapshot g + 1, then replaces the
journal with an empty one of g + 1; a crash between the two leaves an older journal, which
is ignored (the snapshot holds it).

Durability. ACK, REJECT and RELEASE entries are durable before the call returns (one write
per call, whatever the number of records; concurrent calls share one fsync). ACQUIRE entries (one per poll) are
written but not fsync'd: a kill -9 keeps them (the page cache survives), so after it every
unfinished record comes back with its exact delivery count; after a power loss, the
acquisitions since the last fsync may be lost, and those records come back with the count
they had at the last ack/release/reject of the group (never lower than a count a finished
call returned with, so the dead-letter limit can only be reached later, never earlier).

Recovery (`load`) reads the snapshot, replays the journal, and finds the end of the valid
entries. A damaged entry with no valid entry after it that vouches for it is a torn tail
(unsynced acquisitions): it is dropped and reported. Damage inside the synced part of the
journal, a damaged snapshot or journal header, or a journal without its snapshot is
`CorruptQueueStateError`: the group does not open, and nothing is rewritten, so no ack is
silently lost (`kdelay verify` names the file and byte). Damage to the very last fsync'd
write cannot be told from a torn write (nothing after it vouches for it): it is dropped
with the same warning. Deleting both files of the group restarts it from the beginning of
the log (everything delivered again).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading

from ... import fsio
from ...errors import CorruptQueueStateError, KdelayError, LogClosedError, LogWriteError
from ...records import DeliveryKey
from .state_format import (
    ACK,
    ACQUIRE,
    ACQUIRED_BIT,
    DROP,
    JOURNAL_HEADER_SIZE,
    REJECT,
    RELEASE,
    SNAPSHOT_ITEM_SIZE,
    LoadedState,
    acquire_payload,
    apply_entry,
    encode_snapshot,
    entry_at,
    entry_end,
    frame,
    journal_header,
    offsets_payload,
    parse_journal_header,
    parse_snapshot,
    payload_ok,
    release_payload,
    synced_claim_after,
)

__all__ = [
    "ACK", "ACQUIRE", "ACQUIRED_BIT", "DROP", "QUEUES_DIR", "REJECT", "RELEASE",
    "CorruptQueueStateError", "LoadedState", "StateStore", "acquire_payload",
    "encode_snapshot", "group_names", "load", "offline_counts", "offsets_payload", "paths",
    "release_payload", "validate_group", "verify_group",
]

QUEUES_DIR = "queues"
SNAPSHOT_SUFFIX = ".snapshot"
JOURNAL_SUFFIX = ".journal"
MAX_GROUP_NAME = 200  # + ".snapshot.tmp" stays under the 255-byte file-name limit
_SAFE = re.compile(r"[A-Za-z0-9._-]+")

_log = logging.getLogger("kdelay")


def validate_group(group: object) -> str:
    """Queue group names are file names: ASCII letters, digits, '.', '_' and '-', at most
    200 characters, not '.' or '..'. Anything else is refused (KdelayError)."""
    if not isinstance(group, str) or not group:
        raise KdelayError(f"queue group must be a non-empty str, got {group!r}")
    if len(group) > MAX_GROUP_NAME or not _SAFE.fullmatch(group) or group in (".", ".."):
        raise KdelayError(f"queue group name {group!r} is not safe: use at most "
                          f"{MAX_GROUP_NAME} ASCII letters, digits, '.', '_' or '-'")
    return group


def group_names(log_path: str) -> list[str]:
    """The queue groups with state files in a partition directory."""
    try:
        names = os.listdir(os.path.join(log_path, QUEUES_DIR))
    except FileNotFoundError:
        return []
    out = set()
    for name in names:
        for suffix in (SNAPSHOT_SUFFIX, JOURNAL_SUFFIX):
            if name.endswith(suffix) and _SAFE.fullmatch(name[:-len(suffix)]):
                out.add(name[:-len(suffix)])
    return sorted(g for g in out if g not in (".", ".."))


def paths(log_path: str, group: str) -> tuple[str, str]:
    d = os.path.join(log_path, QUEUES_DIR)
    return os.path.join(d, group + SNAPSHOT_SUFFIX), os.path.join(d, group + JOURNAL_SUFFIX)


def load(log_path: str, group: str) -> LoadedState:
    """Read a group's state without changing anything. O(snapshot + journal), and both are
    kept O(records in flight) by compaction. Raises CorruptQueueStateError on damage that a
    crash cannot explain (see the module docstring)."""
    snap_path, journal_path = paths(log_path, group)
    snap = fsio.read_small(snap_path)
    journal = fsio.read_small(journal_path)
    if snap is None:
        if journal is not None:
            raise CorruptQueueStateError("queue journal without its snapshot", journal_path, 0)
        return LoadedState()
    st = parse_snapshot(snap, snap_path)
    if journal is None:
        return st  # a crash while creating the group, after its empty snapshot
    st.journal_exists = True
    gen = parse_journal_header(journal, journal_path)
    if gen < st.generation:
        st.stale_journal = True  # compaction crashed before replacing it: already applied
        return st
    if gen > st.generation:
        raise CorruptQueueStateError(
            f"queue journal generation {gen} is newer than its snapshot's "
            f"({st.generation}): the snapshot is an old copy", journal_path, 0)
    pos = JOURNAL_HEADER_SIZE
    while pos < len(journal):
        entry = entry_at(journal, pos)
        if entry is None or not payload_ok(entry[0], entry[2]):
            break
        apply_entry(st, entry[0], entry[2])
        st.journal_entries += 1
        pos = entry_end(pos, entry[2])
    st.journal_end = pos
    if pos < len(journal):
        vouched = synced_claim_after(journal, pos)
        if vouched > pos:
            raise CorruptQueueStateError(
                f"queue journal entry is damaged inside the synced part (a later entry "
                f"says {vouched} bytes were on disk)", journal_path, pos)
        st.torn = (pos, len(journal) - pos)
    return st


# ---------------------------------------------------------------------- the writer

class StateStore:
    """Appends a group's journal entries and compacts it. `append` and `compact` run under
    the caller's lock (the queue's partition state); `sync_to` may run outside it, so that
    calls of several threads share one fsync (group commit): an fsync makes durable every
    entry written before it started, whoever wrote it."""

    def __init__(self, log_path: str, group: str, *, compact_min_bytes: int = 1 << 20):
        self.log_path = log_path
        self.group = validate_group(group)
        self.snapshot_path, self.journal_path = paths(log_path, group)
        self.compact_min_bytes = compact_min_bytes
        self._fd = -1
        self._end = JOURNAL_HEADER_SIZE
        self._synced = JOURNAL_HEADER_SIZE
        self.generation = 0
        self.loaded: LoadedState | None = None
        # sequence numbers: bytes ever written to the journal (over all generations), and
        # how many of them are known durable
        self._lsn = 0
        self._durable_lsn = 0
        self._sync_lock = threading.Lock()
        self.failed: LogWriteError | None = None
        self.closed = False

    def open(self) -> LoadedState:
        """Load (raising on damage); drop a torn tail or a stale journal durably."""
        st = load(self.log_path, self.group)
        self.loaded = st
        for leftover in (self.snapshot_path + ".tmp", self.journal_path + ".tmp"):
            fsio.unlink(leftover)  # an interrupted atomic_write
        self.generation = st.generation
        if not st.exists:
            return st  # files are made at the first write
        if st.stale_journal or not st.journal_exists:
            fsio.atomic_write(self.journal_path, journal_header(st.generation))
            st.journal_end = JOURNAL_HEADER_SIZE
        self._fd = fsio.open_append(self.journal_path)
        if st.torn is not None:
            _log.warning("kdelay queue group %r: dropped %d bytes of torn journal tail at "
                         "byte %d (%s): acquisitions not yet fsync'd when the process died",
                         self.group, st.torn[1], st.torn[0], self.journal_path)
            fsio.truncate(self._fd, st.journal_end)
            fsio.fsync(self._fd)
        self._end = self._synced = st.journal_end
        return st

    @property
    def journal_bytes(self) -> int:
        return self._end

    def _create(self) -> None:
        d = os.path.dirname(self.snapshot_path)
        if not os.path.isdir(d):
            os.makedirs(d, exist_ok=True)
            fsio.fsync_dir(self.log_path)
        fsio.atomic_write(self.snapshot_path, encode_snapshot(0, None, 0, 0, []))
        fsio.atomic_write(self.journal_path, journal_header(0))
        self._fd = fsio.open_append(self.journal_path)
        self._end = self._synced = JOURNAL_HEADER_SIZE

    def append(self, entries: list[tuple[int, bytes]], *, sync: bool) -> int:
        """Write entries (kind, payload) as one write; with `sync`, also make them durable.
        Returns the sequence number to hand to `sync_to`. A failed write is cut back off
        the journal, so a refused call leaves no entry behind."""
        self.check_failed()
        if self._fd < 0:
            self._check_open()
            self._create()
        data = b"".join(frame(kind, self._synced, payload) for kind, payload in entries)
        start = self._end
        try:
            fsio.write(self._fd, data, start)
        except OSError as e:
            with contextlib.suppress(OSError):
                fsio.truncate(self._fd, start)
            raise _write_error(e, self.journal_path) from e
        self._end = start + len(data)
        self._lsn += len(data)
        lsn = self._lsn
        if sync:
            self.sync_to(lsn)
        return lsn

    def sync_to(self, lsn: int) -> None:
        """Return once every journal byte up to sequence number `lsn` is durable: at most
        one fsync, shared with any caller that arrives while it runs. A failed fsync
        leaves the page cache in an unknown state: the store refuses all further work
        (reopen the group to recover from what is on disk)."""
        with self._sync_lock:
            if self._durable_lsn >= lsn:
                return
            self.check_failed()
            self._check_open()
            # read before the fsync: everything written by then is covered by it
            target_lsn, target_end = self._lsn, self._end
            try:
                fsio.fsync(self._fd)
            except OSError as e:
                self.failed = _write_error(e, self.journal_path)
                raise self.failed from e
            self._durable_lsn = target_lsn
            self._synced = max(self._synced, target_end)

    def check_failed(self) -> None:
        """LogWriteError once an fsync of the journal has failed (see `sync_to`)."""
        if self.failed is not None:
            raise LogWriteError(self.failed.errno, f"queue group {self.group!r}: an earlier "
                                f"journal fsync failed; reopen the group", self.journal_path)

    def should_compact(self, inflight: int) -> bool:
        """The journal has outgrown a snapshot of the in-flight set (2x, and a floor so a
        small set is not rewritten on every call)."""
        return self._end > max(self.compact_min_bytes, 2 * (64 + inflight * SNAPSHOT_ITEM_SIZE))

    def compact(self, cursor: DeliveryKey | None, acked: int, rejected: int,
                items: list[tuple[int, int, int]]) -> None:
        """Write the state as snapshot g + 1, then an empty journal of g + 1. O(items).
        The snapshot holds every change applied so far, so it makes all of them durable;
        the sync lock keeps a concurrent group-commit fsync off the descriptor swapped."""
        self.check_failed()
        self._check_open()
        gen = self.generation + 1
        with self._sync_lock:
            fsio.atomic_write(self.snapshot_path, encode_snapshot(gen, cursor, acked,
                                                                  rejected, items))
            self.generation = gen
            self._durable_lsn = self._lsn
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            fsio.atomic_write(self.journal_path, journal_header(gen))
            self._fd = fsio.open_append(self.journal_path)
            self._end = self._synced = JOURNAL_HEADER_SIZE

    def _check_open(self) -> None:
        """LogClosedError once closed: a closed store never writes again (the group's next
        owner opens its files afresh), and never makes them anew."""
        if self.closed:
            raise LogClosedError(f"queue group {self.group!r} state in {self.log_path} is "
                                 f"closed")

    def close(self) -> None:
        with self._sync_lock:
            self.closed = True
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _write_error(e: OSError, path: str) -> LogWriteError:
    return LogWriteError(e.errno, f"queue journal write to {path} failed: {e.strerror or e}",
                         e.filename)


def offline_counts(st: LoadedState, now: int) -> dict:
    """A group's counts from its files alone (a group not open in this process; see
    queue_groups.group_counts): `acquired` are the records whose last recorded event is an
    acquisition (held by a live process, or by one that died: those are available again
    at the group's next open); `available` and `delayed` split the rest of the in-flight
    set at `now` (records after the cursor are not counted here)."""
    acquired = available = delayed = 0
    for off, (_, at) in st.inflight.items():
        if off in st.acquired:
            acquired += 1
        elif at <= now:
            available += 1
        else:
            delayed += 1
    return {"acquired": acquired, "available": available, "delayed": delayed,
            "acked": st.acked, "rejected": st.rejected, "in_flight": len(st.inflight),
            "cursor": st.cursor}


def verify_group(log_path: str, group: str, log_end: int | None = None
                 ) -> list[tuple[bool, str, int | None, str]]:
    """Read-only check of a group's files for `kdelay verify`: (is a problem, path, byte
    position, message) per finding. Damage `load` refuses is a problem; a torn tail (what a
    power loss leaves; dropped at the next open) and offsets past `log_end` (the log lost
    an unflushed tail the group had seen; forgotten at the next open) are notes."""
    snap_path, journal_path = paths(log_path, group)
    try:
        st = load(log_path, group)
    except CorruptQueueStateError as e:
        return [(True, e.path or snap_path, e.position, str(e).split(" (")[0])]
    out: list[tuple[bool, str, int | None, str]] = []
    if st.torn is not None:
        out.append((False, journal_path, st.torn[0],
                    f"torn tail of {st.torn[1]} bytes (acquisitions not fsync'd before a "
                    f"crash); dropped when the group next opens"))
    if st.stale_journal:
        out.append((False, journal_path, 0, "journal predates the snapshot (compaction was "
                    "interrupted); replaced when the group next opens"))
    if log_end is not None:
        beyond = sum(1 for o in st.inflight if o >= log_end)
        if beyond or (st.cursor is not None and st.cursor.offset >= log_end):
            out.append((False, journal_path, None,
                        f"the group has seen offsets at or past the log end {log_end} "
                        f"({beyond} in flight): the log lost an unflushed tail; they are "
                        f"forgotten when the group next opens"))
    return out
