"""Topic: N partition Logs under one root, laid out and keyed as in Kafka.

Partition `i` of topic `name` lives in `root/name-i`. The partition count is stored in
`root/.kdelay-topics/name` (JSON, written atomically), so reopening with another count is
refused instead of silently re-hashing keys onto different partitions. The metadata lives
in a subdirectory because a 249-character name leaves no room for a suffix (plus the
atomic write's ".tmp") within the file system's 255-byte name limit.

Every partition Log gets an append listener that tells the topic's `ActivitySignal` when
the batch comes due: a Consumer long-polling several partitions sleeps on that one signal
(fetch.long_poll, with a timer to the earliest pending deliverAfter) instead of polling,
woken only by what comes due before its timer.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence

from .. import forks, fsio
from ..clock import Clock
from ..config import LogConfig
from ..errors import InvalidRecordError, InvalidTopicError, KdelayError, os_errors
from ..fetch.long_poll import ActivitySignal, due_in_ms
from ..partition import Log
from ..records import AppendResult, Record
from ..validation import as_int, check_open_args, is_int, is_positive_int
from .partitioner import partition_for_key
from .topic_metrics import topic_metrics

__all__ = ["META_DIR", "MAX_TOPIC_NAME_LENGTH", "Topic", "fair_round", "validate_topic_name"]

MAX_TOPIC_NAME_LENGTH = 249  # Kafka's limit (255 minus room for "-<partition>" suffixes)
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
META_DIR = ".kdelay-topics"
_META_FORMAT = "kdelay-topic v1"


def validate_topic_name(name: object) -> str:
    """Kafka's topic-name rules. These also keep every partition directory a direct child
    of the root: no separator, and never "." or ".."."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a str, got {type(name).__name__}")
    if not name:
        raise InvalidTopicError("topic name must not be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters; the maximum is {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-'")
    return name


def fair_round(order: list[int], budget: int, take: Callable[[int, int], list]) -> list:
    """One non-blocking pass of a multi-partition poll: each partition in `order` gets an
    equal share of what is left of `budget` (`take(i, n)` returns up to n items from
    partition i); those that filled their share may hold more and are asked again."""
    out: list = []
    active = order
    while budget > 0 and active:
        share = max(1, budget // len(active))
        still_full = []
        for i in active:
            if budget <= 0:
                break
            n = min(share, budget)
            got = take(i, n)
            out += got
            budget -= len(got)
            if len(got) == n:
                still_full.append(i)
        active = still_full
    return out


class Topic(forks.Owned):
    """Open with `Topic.open(root, name, partitions=N, config=..., clock=...)`."""

    def __init__(self, root: str, name: str, logs: list[Log]):
        self.root = root
        self.name = name
        self._logs = logs
        self.signal = ActivitySignal()
        for log in logs:
            # every append, however it is made, may wake waiting consumers
            log.add_append_listener(self._wake)
        self._rr_lock = threading.Lock()
        self._next_keyless = 0
        self._closed = False
        self._clock_source: Clock | None = None
        self._owner = forks.Ownership(self, f"topic {name!r} in {root}")

    @classmethod
    def open(cls, root: str | os.PathLike, name: str, partitions: int | None = None,
             config: LogConfig | None = None, clock: Clock | None = None) -> Topic:
        """Open (creating if missing) topic `name` under `root`. `partitions` None means the
        stored count (1 for a new topic); any other count than the stored one is refused."""
        name = validate_topic_name(name)
        if partitions is not None:
            partitions = as_int(partitions, "partitions", lo=1, error=InvalidTopicError)
        root, config = check_open_args(root, config, clock, "topic root")
        return os_errors("open topic", root,
                         lambda: cls._open(root, name, partitions, config, clock))

    @classmethod
    def _open(cls, root: str, name: str, partitions: int | None, config: LogConfig,
              clock: Clock | None) -> Topic:
        os.makedirs(root, exist_ok=True)
        meta_path = os.path.join(root, META_DIR, name)
        stored = _read_meta(meta_path, name)
        found = _existing_partitions(root, name)
        if stored is not None:
            if found and max(found) >= stored:
                raise InvalidTopicError(
                    f"topic {name!r} in {root} is recorded with {stored} partitions but has a "
                    f"directory for partition {max(found)}")
            count = stored
        elif found:
            # directories without metadata (e.g. made by another tool): infer the count
            count = max(found) + 1
        else:
            count = partitions if partitions is not None else 1
        if partitions is not None and partitions != count:
            raise InvalidTopicError(
                f"topic {name!r} in {root} has {count} partitions; cannot reopen it with "
                f"{partitions} (keys would map to other partitions)")
        if stored is None:
            if not os.path.isdir(os.path.dirname(meta_path)):
                os.makedirs(os.path.dirname(meta_path), exist_ok=True)
                fsio.fsync_dir(root)
            body = {"format": _META_FORMAT, "name": name, "partitions": count}
            fsio.atomic_write(meta_path, (json.dumps(body) + "\n").encode())
        logs: list[Log] = []
        try:
            for i in range(count):
                logs.append(Log.open(os.path.join(root, f"{name}-{i}"), config=config,
                                     clock=clock))
        except BaseException:
            for log in logs:
                log.close()
            raise
        topic = cls(root, name, logs)
        topic._clock_source = clock  # the clock of partitions added later
        return topic

    def _wake(self, result: AppendResult) -> None:
        self.signal.comes_due(due_in_ms(result))

    # ------------------------------------------------------------------ access

    @property
    def partitions(self) -> int:
        return len(self._logs)

    def partition(self, i: int) -> Log:
        if not is_int(i) or not 0 <= i < len(self._logs):
            raise KdelayError(f"topic {self.name!r} has no partition {i!r} "
                              f"(it has {len(self._logs)})")
        return self._logs[int(i)]

    @property
    def logs(self) -> list[Log]:
        return list(self._logs)

    def now(self) -> int:
        """The log clock (Log.now): the latest of the partitions' clocks, so never below
        a time any of them has handed out."""
        return max(log.now() for log in self._logs)

    def metrics(self) -> dict:
        """The partitions' Log.metrics() added up (topic_metrics: counts summed, per
        consumer and queue group too), each partition's under "partitions"."""
        if self._closed:
            raise self._owner.refusal()
        return topic_metrics(self.name, [log.metrics() for log in self._logs])

    def partition_for(self, key: bytes | None) -> int:
        """Where a batch with this key goes: murmur2 for a key, round-robin without one."""
        if key is None:
            with self._rr_lock:
                p = self._next_keyless % len(self._logs)
                self._next_keyless += 1
            return p
        if not isinstance(key, (bytes, bytearray)):
            raise InvalidRecordError(f"key must be bytes or None, got {type(key).__name__}")
        return partition_for_key(bytes(key), len(self._logs))

    # ------------------------------------------------------------------ writing

    def send(self, records: Record | Sequence[Record], *, key: bytes | None = None,
             deliver_after: int | None = None, delay_ms: int | None = None
             ) -> tuple[int, AppendResult]:
        """Append one batch (one Record, or a sequence of them) to the partition chosen
        from `key`, else the first record's key (Kafka's default partitioner); keyless
        batches rotate over the partitions. `delay_ms`: due at that partition's log clock
        now plus `delay_ms` (Log.append)."""
        if self._closed:
            raise self._owner.refusal()
        if key is None and isinstance(records, (list, tuple)) and records:
            first = records if isinstance(records, Record) else records[0]
            if isinstance(first, Record):
                key = first.key
        p = self.partition_for(key)
        return p, self._logs[p].append(records, deliver_after=deliver_after,
                                       delay_ms=delay_ms)

    def cancel(self, partition: int, offsets: int | Iterable[int]) -> int:
        """Cancel pending records of one partition by offset (see Log.cancel)."""
        if self._closed:
            raise self._owner.refusal()
        return self.partition(partition).cancel(offsets)

    def reschedule(self, partition: int, offset: int, deliver_after: int | None = None, *,
                   delay_ms: int | None = None) -> AppendResult:
        """Move one pending record of a partition to `deliver_after` (or `delay_ms` from
        now; see Log.reschedule); the copy stays in that partition."""
        if self._closed:
            raise self._owner.refusal()
        return self.partition(partition).reschedule(offset, deliver_after, delay_ms=delay_ms)

    def add_partitions(self, count: int, config: LogConfig | None = None,
                       clock: Clock | None = None) -> None:
        """Grow the topic to `count` partitions (more only: InvalidTopicError otherwise), as
        Kafka's CreatePartitions does: keys then map onto the new count. The new count is
        recorded first (atomically), then the new partitions are created and opened, so a
        crash between the two leaves a topic whose missing partitions its next open
        creates. `config` and `clock` are those of the new partitions (default: the first
        partition's). Cost: one atomic write and one Log.open per new partition."""
        if self._closed:
            raise self._owner.refusal()
        count = as_int(count, "partitions", lo=1, error=InvalidTopicError)
        if count <= len(self._logs):
            raise InvalidTopicError(f"topic {self.name!r} has {len(self._logs)} partitions; "
                                    f"it can only grow (asked for {count})")
        first = self._logs[0]
        config = config or first.config
        meta_path = os.path.join(self.root, META_DIR, self.name)
        body = {"format": _META_FORMAT, "name": self.name, "partitions": count}
        os_errors("growing topic in", self.root, lambda: fsio.atomic_write(
            meta_path, (json.dumps(body) + "\n").encode()))
        for i in range(len(self._logs), count):
            log = Log.open(os.path.join(self.root, f"{self.name}-{i}"), config=config,
                           clock=clock or self._clock_source)
            log.add_append_listener(self._wake)
            self._logs.append(log)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close every partition (each flushes and marks itself cleanly shut down). A
        second close does nothing; in a forked child, close is refused and touches
        nothing."""
        if self._closed:
            self._owner.check_close_again()
            return
        self._closed = True
        errors = []
        for log in self._logs:
            try:
                log.close()
            except Exception as e:  # close the rest anyway
                errors.append(e)
        self.signal.bump()  # waiting consumers wake and see the closed logs
        if errors:
            raise errors[0]

    def _orphaned(self) -> None:
        """In a forked child (kdelay.forks): closed for good, touching nothing (its Logs
        are orphaned themselves)."""
        self._closed = True

    def __repr__(self) -> str:
        return f"Topic({self.root!r}, {self.name!r}, partitions={len(self._logs)})"


def _read_meta(path: str, name: str) -> int | None:
    raw = fsio.read_small(path)
    if raw is None:
        return None
    try:
        meta = json.loads(raw)
        count = meta["partitions"]
        ok = meta.get("format") == _META_FORMAT and meta.get("name") == name
    except (ValueError, KeyError, TypeError, AttributeError):
        ok, count = False, None
    if not ok or not is_positive_int(count):
        raise InvalidTopicError(f"topic metadata file {path} is corrupt")
    return count


def _existing_partitions(root: str, name: str) -> list[int]:
    """Partition numbers of the `name-<i>` directories already under root."""
    prefix = name + "-"
    out = []
    with os.scandir(root) as it:
        for entry in it:
            tail = entry.name[len(prefix):]
            if entry.name.startswith(prefix) and tail.isdigit() and tail.isascii() \
                    and str(int(tail)) == tail and entry.is_dir():
                out.append(int(tail))
    return out
