"""Opening a directory with tiered storage: what the loader (which may not import this
layer's modules) asks of it, and the adoption of copies the directory does not know.

- `committed_copy(base)`: the RemoteCopy recorded in `N.remote` beside a local segment
  (None if there is none, or it is damaged: the next sync copies the segment again and
  adopts the committed manifest);
- `remote_segment(base)`: a RemoteSegment for a remote-only segment (only `N.remote`
  local); a damaged `N.remote` is restored from the store's manifest;
- `adopt(names)`: one list request; every committed manifest whose offsets overlap no
  segment the directory knows is adopted: its `.cancelled` object (checked against the
  manifest) becomes the segment's cancellation journal unless the directory still has
  that journal, then its manifest is written as `N.remote` (the commit point of the
  adoption: a crash before it leaves only a journal without a segment, a leftover). This
  is how an empty directory serves the copied history and appends after it. A store that
  cannot be reached, or a damaged copy (manifest or `.cancelled` object), stops the
  adoption there: an existing directory opens with what it knows (the error is recorded
  and reported), an empty one, which cannot know where the log ends, is refused. Before
  that, the cache keeps only the index files of the remote-only segments (index_cache.py).
"""

from __future__ import annotations

import logging
import os

from ... import fsio
from ...errors import CorruptLogError, RemoteStorageError
from ..cancellation.journal import CANCEL, JOURNAL_SUFFIX, encode_entry, journal_header
from ..segments.layout import classify_directory, segment_file
from .cancelled_object import (
    CANCELLATIONS_SUFFIX,
    CANCELLED_SUFFIX,
    decode_cancellations,
    decode_cancelled,
)
from .copier import read_manifest
from .index_cache import remove_stale_files
from .manifest import MANIFEST_SUFFIX, RemoteCopy, decode, parse_object_name
from .remote_marker import read_remote_marker, write_remote_marker
from .remote_segment import RemoteSegment
from .tier import RemoteTier, record_settings

log = logging.getLogger("kdelay")


class TieredDirectory:
    def __init__(self, directory: str, tier: RemoteTier):
        self.directory = directory
        self.tier = tier
        self.problems: list[str] = []

    def committed_copy(self, base: int) -> RemoteCopy | None:
        try:
            return read_remote_marker(self.directory, base)
        except CorruptLogError as e:
            self.problems.append(f"segment {base}: {e}; it will be copied again")
            return None

    def remote_segment(self, base: int) -> RemoteSegment:
        if self.tier.store.volatile:
            raise RemoteStorageError(
                f"{self.directory}: segment {base} is held only in an object store, and "
                f"{self.tier.store.url} vanishes with its process: open it with the store "
                f"that holds its copy")
        copy = self.committed_copy(base)
        if copy is None:  # damaged locally: the store's manifest is the same bytes
            copy = read_manifest(self.tier.store, base)
            write_remote_marker(self.directory, copy)
        return RemoteSegment(self.directory, copy, self.tier)

    def adopt(self) -> list[int]:
        """Adopt the store's committed copies the directory does not know (see the
        module's docstring); returns their bases. Raises only for a directory with no
        segment: RemoteStorageError, or CorruptLogError naming a damaged object."""
        record_settings(self.directory, self.tier.config)  # for the CLI and Spark
        listing = classify_directory(self.directory)
        remove_stale_files(self.tier, listing.remote_only)
        known = listing.bases
        # retention gave these up: a crash before the sync deleted their manifests
        deleting = set(listing.deleting)
        adopted: list[int] = []
        try:
            stored = self.tier.store.list()
            for name in sorted(stored, reverse=True):  # newest first: see _overlaps
                parsed = parse_object_name(name)
                if (parsed is None or parsed[2] != MANIFEST_SUFFIX or parsed[0] in known
                        or parsed[0] in deleting):
                    continue
                copy = decode(self.tier.store.get(name), self.tier.store.describe(name),
                              parsed[0])
                if _overlaps(copy, known):
                    continue
                if known and copy.next_offset != known[0]:
                    # copies must meet end to end: a log restored across the hole would
                    # have offsets missing in its middle
                    raise RemoteStorageError(
                        f"no copy in {self.tier.store.describe('')} ends where segment "
                        f"{known[0]} begins (the newest copy below ends at "
                        f"{copy.next_offset}): the history before {known[0]} is not "
                        f"restored")
                self._adopt(copy, stored)
                known.insert(0, copy.base_offset)
                adopted.append(copy.base_offset)
        except (RemoteStorageError, CorruptLogError) as e:
            self.tier.failed(e)
            if not known and isinstance(e, CorruptLogError):
                raise  # damage (named): a log opened without that copy would reuse its offsets
            if not known:
                raise RemoteStorageError(f"{self.directory} holds no segment and the object "
                                         f"store cannot say where the log ends: {e}") from e
            self.problems.append(f"copies in the store not adopted: {e}")
            log.warning("kdelay open: %s", self.problems[-1])
        return adopted

    def _adopt(self, copy: RemoteCopy, stored: dict[str, int]) -> None:
        journal_path = segment_file(self.directory, copy.base_offset, JOURNAL_SUFFIX)
        # a journal still here (only the marker was lost) holds the copy's cancellations
        # and those made since: the objects know no more (the sync exports only what is
        # durable here)
        if not os.path.exists(journal_path):
            offsets = self._stored_cancellations(copy, stored)
            if offsets:
                journal = journal_header(copy.base_offset, 0) + b"".join(
                    encode_entry(CANCEL, offset) for offset in sorted(offsets))
                fsio.atomic_write(journal_path, journal)
        write_remote_marker(self.directory, copy)

    def _stored_cancellations(self, copy: RemoteCopy, stored: dict[str, int]) -> set[int]:
        """The offsets the store holds as cancelled for `copy`: its `.cancelled` object
        (checked against the manifest) and its `.cancellations` object (checking itself),
        when there. Raises CorruptLogError naming a damaged one."""
        store = self.tier.store
        out: set[int] = set()
        if CANCELLED_SUFFIX in copy.objects:
            name = copy.object_name(CANCELLED_SUFFIX)
            data, where = store.get(name), store.describe(name)
            copy.check_object(CANCELLED_SUFFIX, data, where)  # size and CRC: the manifest's
            out.update(decode_cancelled(data, copy.base_offset, copy.next_offset,
                                        where).tolist())
        name = copy.object_name(CANCELLATIONS_SUFFIX)
        if name in stored:
            out.update(decode_cancellations(store.get(name), copy.base_offset,
                                            copy.next_offset, store.describe(name)).tolist())
        return out


def _overlaps(copy: RemoteCopy, known: list[int]) -> bool:
    """Might `copy` reach into a known segment? Their ends are not known before loading,
    so only a copy below every known segment, ending at or before the first, does not."""
    return bool(known) and (copy.base_offset >= known[0] or copy.next_offset > known[0])
