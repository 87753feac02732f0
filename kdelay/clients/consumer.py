"""Consumer: a consumer group's cursor over a Log or a Topic, with retries.

Position semantics follow Kafka: `poll` continues after the last record it returned,
`commit` durably stores that position (the DeliveryKey of the last polled record) in the
log's group store, and a new Consumer of the same group starts after the committed key. So
records polled but not committed are delivered again after a crash: at-least-once.

On a Topic every partition has its own position (committed on that partition's Log under
the same group name); a poll shares `max_records` over the partitions, starting from a
different one each time, and tags each record with its partition.

Retries follow Pulsar's reconsumeLater: `retry` re-appends the record to the partition it
came from, due later, with a `kdelay.attempt` header counting the retries; past
`max_attempts` it goes to a dead-letter Log or Topic instead.

Iterating a Consumer (`for rec in consumer:`) yields records one at a time, polling and
waiting as needed, until `consumer_timeout_ms` pass without one (None: forever), as
kafka-python's does. A page polled for the iteration is handed out record by record, and
the position moves with each record handed out: a `commit()` between two records stores
only what the loop has seen.

A Consumer is not thread-safe (as in Kafka): use one per thread. `close()` (or leaving a
`with` block) ends it: every later call raises LogClosedError. It does not commit.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import time
from collections import deque
from typing import NamedTuple

import numpy as np

from ..errors import InvalidConfigError, InvalidRecordError, KdelayError, LogClosedError
from ..fetch.long_poll import long_poll
from ..partition import Log
from ..records import AppendResult, DeliveryKey, FetchedRecord, Record
from ..validation import as_int, check_page_limits, is_int, time_after
from .dead_letter import MAX_DELIVERY_COUNT, dead_letter_copy
from .topic import Topic, fair_round

__all__ = ["ATTEMPT_HEADER", "Consumer", "RetryOutcome", "attempt_of", "backoff_ms"]

ATTEMPT_HEADER = "kdelay.attempt"
MAX_ATTEMPT = 999_999_999
_new_tuple = tuple.__new__
RETRIED = "retried"
DEAD_LETTERED = "dead_lettered"
# an iteration without consumer_timeout_ms long-polls in rounds of this (ms): each round
# sleeps until something comes due, so the length only bounds one poll's wait
_ITERATION_POLL_MS = 60_000


class RetryOutcome(NamedTuple):
    """What `Consumer.retry` did: `action` is "retried" or "dead_lettered"; `attempt` is the
    retry count now carried by the record (unchanged when dead-lettered); `partition` and
    `result` say where the copy was written (`partition` None for a Log)."""

    action: str
    attempt: int
    partition: int | None
    result: AppendResult

    @property
    def dead_lettered(self) -> bool:
        return self.action == DEAD_LETTERED


def backoff_ms(attempt: int, *, base_ms: int = 1000, factor: float = 2.0,
               max_ms: int = 3_600_000, jitter: float = 0.0,
               rng: random.Random | None = None) -> int:
    """Exponential backoff for retry number `attempt` (1 = first retry):
    `min(max_ms, base_ms * factor ** (attempt - 1))`, then, with `jitter` j in [0, 1],
    scaled by a uniform factor in [1 - j, 1] so retries of many records spread out.
    Deterministic when jitter is 0. Bad settings raise InvalidConfigError (a ValueError)."""
    attempt = as_int(attempt, "attempt", lo=1, error=InvalidConfigError)  # a plain int
    base_ms, factor, max_ms, jitter = check_backoff(base_ms, factor, max_ms, jitter)
    delay = float(max_ms)
    if base_ms == 0:
        delay = 0.0
    else:
        with contextlib.suppress(OverflowError):  # past any float: max_ms
            delay = min(delay, base_ms * factor ** (attempt - 1))
    if jitter:
        delay *= 1.0 - jitter * (rng or random).random()
    return min(int(delay), max_ms)  # a float max_ms may round up past the int


def check_backoff(base_ms: object, factor: object, max_ms: object, jitter: object
                  ) -> tuple[int, float, int, float]:
    """The backoff settings, checked: base_ms and max_ms ints >= 0, factor a number >= 1,
    jitter a number in [0, 1]."""
    def number(x: object, what: str) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise InvalidConfigError(f"{what} must be a number, got {x!r}")
        return float(x)

    base = as_int(base_ms, "backoff base_ms", error=InvalidConfigError)
    top = as_int(max_ms, "backoff max_ms", error=InvalidConfigError)
    f = number(factor, "backoff factor")
    j = number(jitter, "backoff jitter")
    if not f >= 1:  # also refuses NaN
        raise InvalidConfigError(f"backoff factor must be >= 1, got {factor!r}")
    if not 0.0 <= j <= 1.0:
        raise InvalidConfigError(f"backoff jitter must be in [0, 1], got {jitter!r}")
    return base, f, top, j


def attempt_of(record: FetchedRecord | Record) -> int:
    """The retry count a record carries in its `kdelay.attempt` header (0 without one;
    an unreadable value also counts as 0, so a bad header cannot wedge the retry path)."""
    value = None
    for k, v in record.headers:
        if k == ATTEMPT_HEADER:
            value = v  # the last one wins, as with Kafka's Headers.lastHeader
    if value is None:
        return 0
    try:
        text = value.decode("ascii")
    except (UnicodeDecodeError, AttributeError):
        return 0
    if not text.isdigit():
        return 0
    # a count beyond any real retry (and beyond what str() of an int may print) is capped
    return MAX_ATTEMPT if len(text) > 9 else min(int(text), MAX_ATTEMPT)


class Consumer:
    """`Consumer(log_or_topic, group, max_attempts=None, dead_letter=None,
    consumer_timeout_ms=None)`; a context manager and an iterator of records."""

    def __init__(self, source: Log | Topic, group: str, *, max_attempts: int | None = None,
                 dead_letter: Log | Topic | None = None, backoff_base_ms: int = 1000,
                 backoff_factor: float = 2.0, backoff_max_ms: int = 3_600_000,
                 backoff_jitter: float = 0.0, consumer_timeout_ms: int | None = None):
        if isinstance(source, Topic):
            self._topic: Topic | None = source
            self._logs = source.logs
        elif isinstance(source, Log):
            self._topic = None
            self._logs = [source]
        else:
            raise KdelayError(f"Consumer needs a Log or a Topic, got {type(source).__name__}")
        if not isinstance(group, str) or not group:
            raise KdelayError(f"group must be a non-empty str, got {group!r}")
        if max_attempts is not None:
            max_attempts = as_int(max_attempts, "max_attempts")
            if dead_letter is None:
                raise KdelayError("max_attempts needs a dead_letter Log or Topic")
        if dead_letter is not None and not isinstance(dead_letter, (Log, Topic)):
            raise KdelayError(f"dead_letter must be a Log or a Topic, "
                              f"got {type(dead_letter).__name__}")
        self.source = source
        self.group = group
        self.max_attempts = max_attempts
        self.dead_letter = dead_letter
        if consumer_timeout_ms is not None:
            consumer_timeout_ms = as_int(consumer_timeout_ms, "consumer_timeout_ms")
        self.consumer_timeout_ms = consumer_timeout_ms
        base, factor, top, jitter = check_backoff(backoff_base_ms, backoff_factor,
                                                  backoff_max_ms, backoff_jitter)
        self._backoff = functools.partial(backoff_ms, base_ms=base, factor=factor, max_ms=top,
                                          jitter=jitter)
        # joining fences every older Consumer of the group on these logs (Kafka's group
        # generations): two members would both consume, and move the position backwards
        self._generations = [log.clients.join_group(group) for log in self._logs]
        self._committed: list[DeliveryKey | None] = [log.committed(group) for log in self._logs]
        self._positions: list[DeliveryKey | None] = list(self._committed)
        self._start = 0  # first partition of the next poll (rotates for fairness)
        self._ahead: deque[FetchedRecord] = deque()  # polled for the iteration, not yet yielded
        self._closed = False

    # ------------------------------------------------------------------ positions

    @property
    def positions(self) -> list[DeliveryKey | None]:
        """Per partition (one entry for a Log): the key of the last record polled."""
        return list(self._positions)

    @property
    def committed(self) -> list[DeliveryKey | None]:
        """Per partition: the position last committed (as read at start, or by `commit`)."""
        return list(self._committed)

    def commit(self) -> None:
        """Durably store the position after the last poll (only partitions that moved).
        Refused (LogClosedError) once a Log is closed, even with nothing to store."""
        self._check_open()
        for log in self._logs:
            log.clients.check_open()
        self._check_member()
        for i, log in enumerate(self._logs):
            if self._positions[i] != self._committed[i]:
                log.commit(self.group, self._positions[i], generation=self._generations[i])
                self._committed[i] = self._positions[i]

    def _check_member(self) -> None:
        """GroupFencedError if a newer Consumer of this group joined on any of the logs."""
        for log, gen in zip(self._logs, self._generations, strict=True):
            log.clients.check_member(self.group, gen)

    def rewind(self) -> None:
        """Go back to the committed positions: the next poll re-delivers what was polled
        since the last commit (what a restart would do)."""
        self._check_open()
        self._ahead.clear()
        self._positions = list(self._committed)

    # ------------------------------------------------------------------ poll

    def poll(self, max_records: int = 500, timeout_ms: int = 0) -> list[FetchedRecord]:
        """Due records after the current position, at most `max_records`. With `timeout_ms`
        > 0 and nothing due, waits until something is due or the time is up."""
        max_records, _, timeout_ms = check_page_limits(max_records, 1, timeout_ms)
        self._check_open()
        self._check_member()
        self._ahead.clear()  # the position is after the last record iterated: poll on from it
        if self._topic is None:
            res = self._logs[0].fetch(self._positions[0], max_records=max_records,
                                      max_wait_ms=timeout_ms)
            self._positions[0] = res.next
            return res.records
        return self._poll_topic(max_records, timeout_ms)

    def _poll_topic(self, max_records: int, timeout_ms: int) -> list[FetchedRecord]:
        def poll_once() -> tuple[list[FetchedRecord], bool]:
            out = self._poll_round(max_records)
            return out, bool(out)

        assert self._topic is not None  # (a Consumer of a Topic polls here)
        return long_poll(poll_once, self._next_due_ms, self._topic.signal,
                         time.monotonic() + timeout_ms / 1000)

    def _next_due_ms(self) -> int | None:
        """How long until the earliest pending record of any partition comes due (ms on
        the log clock; None: nothing is pending)."""
        wait = None
        for log in self._logs:
            now = log.now()
            wake = log.clients.earliest_pending(now)
            if wake is not None and (wait is None or wake - now < wait):
                wait = wake - now
        return wait

    def _poll_round(self, max_records: int) -> list[FetchedRecord]:
        """One non-blocking pass: each partition (from a rotating start) gets an equal share
        of what is left; partitions that filled their share are asked again for the rest."""
        n = len(self._logs)
        order = [(self._start + k) % n for k in range(n)]
        self._start = (self._start + 1) % n
        return fair_round(order, max_records, self._fetch_from)

    def _fetch_from(self, i: int, max_records: int) -> list[FetchedRecord]:
        res = self._logs[i].fetch(self._positions[i], max_records=max_records)
        if not res.records:
            return []
        self._positions[i] = res.next
        # = r._replace(partition=i), without its per-record overhead (~3 µs)
        return [_new_tuple(FetchedRecord, (o, d, t, k, v, h, i))
                for o, d, t, k, v, h, _ in res.records]

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> FetchedRecord:
        """The next due record, polling and waiting as needed; StopIteration once
        `consumer_timeout_ms` have passed without one."""
        self._check_open()
        if not self._ahead:
            self._poll_ahead()
        rec = self._ahead.popleft()
        self._positions[rec.partition or 0] = rec.delivery_key
        return rec

    def _poll_ahead(self) -> None:
        """Poll a page for the iteration, leaving the positions where the iteration is."""
        limit = self.consumer_timeout_ms
        deadline = None if limit is None else time.monotonic() + limit / 1000
        while True:
            wait = _ITERATION_POLL_MS if deadline is None else \
                max(0, math.ceil((deadline - time.monotonic()) * 1000))
            before = list(self._positions)
            page = self.poll(timeout_ms=wait)
            if page:
                self._positions = before  # each record moves them as it is yielded
                self._ahead.extend(page)
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise StopIteration

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """End this consumer: every later call raises LogClosedError. It does not commit
        (call `commit()` first to store the position). A second close does nothing."""
        self._closed = True
        self._ahead.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"this Consumer of group {self.group!r} is closed")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ retry

    def retry(self, record: FetchedRecord, delay_ms: int | None = None) -> RetryOutcome:
        """Re-deliver `record` `delay_ms` from now (default: the backoff for its next
        attempt) with its `kdelay.attempt` header incremented, to the partition it came
        from; once it has been retried `max_attempts` times, send it to the dead letter
        instead. The caller still commits past the original as usual."""
        self._check_open()
        if not isinstance(record, FetchedRecord):
            raise InvalidRecordError(f"retry needs a FetchedRecord, got {type(record).__name__}")
        done = attempt_of(record)
        nxt = done + 1
        if self.max_attempts is not None and nxt > self.max_attempts:
            return self._dead_letter(record, done)
        log, partition = self._origin(record)
        if delay_ms is None:
            delay_ms = self._backoff(nxt)
            # never ask for more than the log allows (PIP-315's trap: a backoff past
            # max_delivery_delay_ms would make every later retry fail)
            if not log.config.delayed_delivery_enable:
                delay_ms = 0
            elif log.config.max_delivery_delay_ms:
                delay_ms = min(delay_ms, log.config.max_delivery_delay_ms)
        else:
            delay_ms = as_int(delay_ms, "delay_ms", error=InvalidRecordError)
        copy = Record(record.value, record.key, _with_attempt(record.headers, nxt))
        # no delay: append without deliver_after, so it also works on a FIFO-only log
        due = None if delay_ms == 0 else time_after(log.now(), delay_ms, "delay_ms",
                                                    InvalidRecordError)
        result = log.append([copy], deliver_after=due)
        return RetryOutcome(RETRIED, nxt, partition, result)

    def _origin(self, record: FetchedRecord) -> tuple[Log, int | None]:
        if self._topic is None:
            return self._logs[0], None
        p = record.partition
        if not is_int(p) or not 0 <= p < len(self._logs):
            raise InvalidRecordError(
                f"record has partition {p!r}; retry on a Topic needs a record polled from it")
        return self._logs[int(p)], int(p)

    def _dead_letter(self, record: FetchedRecord, done: int) -> RetryOutcome:
        """The record's copy (dead_letter.dead_letter_copy) to the dead letter: it has been
        delivered `done` + 1 times, and its retries ran out."""
        copy = dead_letter_copy(record, delivery_count=done + 1, reason=MAX_DELIVERY_COUNT,
                                topic=None if self._topic is None else self._topic.name)
        if isinstance(self.dead_letter, Topic):
            p, result = self.dead_letter.send([copy])
            return RetryOutcome(DEAD_LETTERED, done, p, result)
        assert self.dead_letter is not None  # max_attempts needs one (checked when made)
        return RetryOutcome(DEAD_LETTERED, done, None, self.dead_letter.append([copy]))


def _with_attempt(headers: list, attempt: int) -> list:
    """The headers with `kdelay.attempt` set to `attempt`: replaced where it was (every
    other header kept in order), else added at the end."""
    value = str(attempt).encode("ascii")
    out = []
    replaced = False
    for k, v in headers:
        if k == ATTEMPT_HEADER:
            if not replaced:
                out.append((k, value))
                replaced = True
            continue
        out.append((k, v))
    if not replaced:
        out.append((ATTEMPT_HEADER, value))
    return out
