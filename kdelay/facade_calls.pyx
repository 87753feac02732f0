# cython: language_level=3
"""The Log facade's two hot calls, compiled: `append` and `fetch` are this module's
functions, bound as the Log's methods (partition.py), so that the calls a scheduler loop
makes most are each one C call from the caller's line:

- an append of plain Records: the check of the Records (records_batch.pyx), the log's
  lock, the closed check, the write path to the `pwrite` (log/local/writer.pyx) and the
  notices to waiting fetches (fetch/append_notices.pyx), with no Python frame;
- the idle poll: a fetch passing back the cursor of a page that found nothing more due is
  answered by the quiet gate (fetch/quiet_gate.pyx), with no Python frame either.

Anything else goes to the Log's Python paths (`Log._append_judged`, `Log._fetch_page`),
which judge it and word every error as before. The Log's CallParts hold, typed, the parts
these calls use: those that never change while it is open, and the two that do, its lock
(which a forked child replaces) and its closed flag, which are the Log's `_lock` and
`_closed` themselves (`PartsField`), so that a call reads them in C, with the lock's
`acquire` and `release` looked up once per lock rather than on every call."""

from kdelay.fetch.append_notices cimport AppendNotices
from kdelay.fetch.quiet_gate cimport QuietGate
from kdelay.log.batch.records_batch cimport RecordsBatch, records_batch_of, requested_of
from kdelay.log.local.log_clock cimport LogClock
from kdelay.log.local.writer cimport Writer

from kdelay.errors import raise_write_error
from kdelay.records import Record


cdef class CallParts:
    """The parts of one Log that its hot calls use: its lock and closed flag, and those
    that never change while it is open."""

    cdef Writer writer
    cdef AppendNotices notices
    cdef QuietGate gate
    cdef LogClock clock
    cdef bint delays_allowed  # LogConfig.delayed_delivery_enable
    cdef readonly object lock  # the Log's (`Log._lock`; replaced by `use_lock`)
    cdef object _acquire, _release  # its bound methods
    cdef public bint closed  # `Log._closed`

    def __init__(self, lock, Writer writer not None, AppendNotices notices not None,
                 QuietGate gate not None, LogClock clock not None, bint delays_allowed):
        self.use_lock(lock)
        self.closed = False
        self.writer = writer
        self.notices = notices
        self.gate = gate
        self.clock = clock
        self.delays_allowed = delays_allowed

    def use_lock(self, lock) -> None:
        """Make `lock` the Log's lock (a forked child's Log gets a new one)."""
        self._acquire, self._release = lock.acquire, lock.release
        self.lock = lock


cdef class PartsField:
    """A Log's attribute that is its CallParts' field `name` (`_lock` is `lock`, `_closed`
    is `closed`), read and set in C, so that the Log's Python code and its compiled calls
    share one flag and one lock."""

    cdef readonly str name
    cdef bint _is_lock

    def __init__(self, str name):
        if name not in ("lock", "closed"):
            raise ValueError(f"no CallParts field {name!r}")
        self.name = name
        self._is_lock = name == "lock"

    def __get__(self, obj, objtype):
        if obj is None:
            return self
        cdef CallParts parts = <CallParts?>obj._call_parts
        return parts.lock if self._is_lock else parts.closed

    def __set__(self, obj, value):
        cdef CallParts parts = <CallParts?>obj._call_parts
        if self._is_lock:
            parts.use_lock(value)
        else:
            parts.closed = value


def append(log, records, *, deliver_after=None, delay_ms=None):
    """Write one batch (one Record, or a sequence of them), all of it or nothing, due at
    `deliver_after` (or the log clock now plus `delay_ms`), else the max of the
    records', never below the append time. Cost: O(records) checks and encoding in C,
    one `pwrite`, O(1) index upkeep, an fsync when the flush policy says."""
    cdef CallParts parts
    cdef RecordsBatch batch = None
    try:  # (as errors.write_errors, without its wrapper's frame on every append)
        parts = <CallParts?>log._call_parts
        if delay_ms is None:
            if type(records) is Record:  # a batch of one
                records = (records,)
            batch = records_batch_of(records, deliver_after, parts.delays_allowed)
        if batch is None:  # for the Python path to judge
            return log._append_judged(records, deliver_after, delay_ms)
        return _write_batch(log, parts, batch, requested_of(batch))
    except OSError as e:
        raise_write_error(e, "append", log.path)


def write_batch(log, columns, requested):
    """Append checked `columns` (a RecordsBatch or BatchColumns) as one batch: what every
    append does once its records are judged (the Log's Python paths call it; `append`
    calls it in C). OSError is the caller's to word."""
    return _write_batch(log, <CallParts?>log._call_parts, columns, requested)


cdef inline object _write_batch(log, CallParts parts, columns, requested):
    """Under the Log's lock: the closed check, the write, the notices to waiting fetches;
    after it, the append listeners."""
    release = parts._release  # (the lock's, even if a call under it replaced it)
    parts._acquire()
    try:
        if parts.closed:
            log._check_open()
        result = parts.writer.append(columns, requested)
        parts.notices.under_lock(result)
    finally:
        release()
    if parts.notices.listeners:
        parts.notices.after(result)
    return result


def fetch(log, after=None, *, max_records=500, max_bytes=1 << 20, max_wait_ms=0):
    """Due records strictly after `after`, in (deliverAfter, offset) order. Cost: the
    batches returned (read, CRC-checked, decoded in C) plus planning over the segments
    that can contribute (fetch/planner.py); O(1) when nothing is due (the idle poll is
    answered in C with no lock: fetch/quiet_gate.pyx)."""
    cdef CallParts parts = <CallParts?>log._call_parts
    if not parts.closed:
        quiet = parts.gate.answer(after, max_records, max_bytes, max_wait_ms, parts.clock)
        if quiet is not None:
            return quiet
    return log._fetch_page(after, max_records, max_bytes, max_wait_ms)
