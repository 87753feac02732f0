"""The error hierarchy. Every error kdelay raises on purpose derives from KdelayError."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NoReturn, TypeVar

T = TypeVar("T")


class KdelayError(Exception):
    """Base class of every kdelay error."""


class InvalidRecordError(KdelayError, ValueError):
    """A record or batch that cannot be appended; nothing was written."""


class DeliveryDelayExceededError(InvalidRecordError):
    """A requested delay is longer than `max_delivery_delay_ms` (PIP-315)."""


class DelayedDeliveryDisabledError(InvalidRecordError):
    """A deliver_after was given to a log with `delayed_delivery_enable=False`."""


class CorruptBatchError(InvalidRecordError):
    """A record batch handed in as bytes (a Kafka client's, over the wire) does not parse:
    a framing error, a bad CRC, records that do not fill it. Nothing of it is written."""


class InvalidConfigError(KdelayError, ValueError):
    """A LogConfig setting out of range or of the wrong type."""


class InvalidTopicError(KdelayError, ValueError):
    """A topic name outside Kafka's rules, or a topic reopened with another shape."""


class LogLockedError(KdelayError):
    """Another Log (in this or another process) holds the directory's lock. `pid` is the
    holding process as its lock file names it (None when the file does not say)."""

    def __init__(self, message: str, pid: int | None = None):
        super().__init__(message)
        self.pid = pid


class CorruptLogError(KdelayError):
    """Bytes on disk failed a size, CRC or offset check.

    `path` and `position` say where the damaged batch starts; `reason` is the message
    without them (for a report that shows them apart).
    """

    def __init__(self, message: str, path: str | None = None, position: int | None = None):
        where = ""
        if path is not None:
            where = f" ({path}" + (f" at byte {position}" if position is not None else "") + ")"
        super().__init__(message + where)
        self.reason = message
        self.path = path
        self.position = position


class CorruptQueueStateError(CorruptLogError):
    """A queue group's snapshot or journal is damaged where a crash cannot have left it;
    the group does not open and its files are left as they are."""


class LogClosedError(KdelayError):
    """An operation on a Log that has been closed, or on something attached to one (a
    Topic, a consumer, a queue group) after its Log or itself was closed."""


class ForkedProcessError(LogClosedError):
    """An operation, in a forked child, on a Log (or anything attached to one) that its
    parent opened: to the child it is closed for good (kdelay.forks)."""


class LogWriteError(KdelayError, OSError):
    """A file operation failed while writing (ENOSPC: disk full, EIO, ...). `errno` and
    `filename` are the OSError's. Nothing of a refused append is left for a read to see."""


class RemoteStorageError(KdelayError):
    """The object store of a log with tiered storage failed or did not answer within
    `remote_timeout_ms` (a read that needs a remote segment, a copy, a deletion). Appends
    and reads of local segments go on; nothing local is deleted while copies fail."""


class GroupFencedError(KdelayError):
    """A Consumer whose group was joined by a newer Consumer on the same Log: as with
    Kafka's group generations, the older member may neither poll nor commit any more (its
    commits would move the group's position backwards)."""


class OffsetOutOfRangeError(KdelayError):
    """An offset that is not in the log (deleted by retention, or never written)."""


class IndexFileError(Exception):
    """A persisted index is missing, stale or corrupt (internal: the caller rebuilds it from
    its .log, so it is deliberately not a KdelayError)."""


def write_errors(method):
    """Decorate a writing method of an object with a `path`: an OSError it raises (ENOSPC,
    EIO) surfaces as LogWriteError (raise_write_error)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except OSError as e:
            raise_write_error(e, method.__name__, self.path)
    return wrapper


def raise_write_error(error: OSError, operation: str, path: str) -> NoReturn:
    """Raise an OSError that `operation` on the log at `path` met (ENOSPC, EIO) as
    LogWriteError, a KdelayError that keeps errno and filename, so callers catch one
    hierarchy (one that is a KdelayError already, as it is). Called in the `except` block
    (by write_errors, or by a method too hot for its wrapper: Log.append)."""
    if isinstance(error, KdelayError):
        raise error
    raise LogWriteError(error.errno, f"{operation} on {path} failed: "
                        f"{error.strerror or error}", error.filename) from error


def os_errors(operation: str, path: str, call: Callable[[], T]) -> T:
    """`call()`, an OSError it raises (EIO, ENOSPC, ENOTDIR, EACCES...) surfacing as
    LogWriteError (raise_write_error)."""
    try:
        return call()
    except OSError as e:
        raise_write_error(e, operation, path)


class InspectError(KdelayError):
    """Input the inspector cannot work on: a missing path, a directory that is not a log,
    a file of the wrong kind. Its message is one line meant for a person."""


class IndexUnreadable(KdelayError):
    """An index file too damaged to show (bad magic, header checksum, truncated)."""


class InvalidOffsetError(KdelayError, ValueError):
    """An offset argument that is not a non-negative int (a bool, a float, a string, a
    negative number...). Nothing was written."""
