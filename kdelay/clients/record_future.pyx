# cython: language_level=3
"""The futures a Producer's `send` returns: real `concurrent.futures.Future`s, made and
resolved for a fraction of what Future's own methods cost per record.

The garbage collector's work grows with the objects it tracks, and the objects a send
makes survive its young passes (they wait for their batch's linger): tracked, they made
the collector's full passes, which walk the whole heap, cost as much as the rest of a send.
So a record's future is as little work for the collector as a Future can be:
- the futures of a batch share their batch's Condition (a Future makes its own: a lock, a
  deque, bound methods). The sender resolves them all while holding it, so a waiter
  (Future.result waits once, without a loop) only wakes once its own future is done;
- while pending, a future and its two lists (waiters, callbacks) are untracked by the
  collector. Nothing they refer to can become garbage before the future resolves: its
  batch holds it, it holds the shared Condition, its state and its lists, and only
  Future's own methods add to those. Resolution hands the future back to the collector,
  with each list that holds anything (a waiter that concurrent.futures.wait adds to a
  resolved future's list is removed again before wait returns);
- a RecordMetadata holds four ints: made untracked, as the collector would find it.

Making and resolving them sets Future's own attributes directly, as Future.__init__ and
Future.set_result do, but once per batch for the Condition and the wake-up:
tests/clients/test_producer.py holds both to what a plain Future looks like, so a Python
whose Future changes fails there, not in use.
"""

from concurrent.futures import Future
from threading import Condition

from cpython.object cimport PyObject, PyTypeObject, newfunc
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM

from ..records import RecordMetadata

__all__ = ["RecordFuture", "abandon", "fail", "new_future", "resolve"]


cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject *type, Py_ssize_t nitems)
    void PyObject_GC_Track(void *op)
    void PyObject_GC_UnTrack(void *op)
    int PyObject_GC_IsTracked(object op)


def _states() -> tuple:
    """Future's own values of `_state` for a new and a finished future."""
    future = Future()
    pending = future._state
    future.set_result(None)
    return pending, future._state


_PENDING, _FINISHED = _states()


cdef list _untracked_list():
    cdef list empty = []
    PyObject_GC_UnTrack(<void *>empty)
    return empty


cdef void _track(obj) noexcept:
    if not PyObject_GC_IsTracked(obj):
        PyObject_GC_Track(<void *>obj)


class RecordFuture(Future):
    """The Future of one sent record (made by `new_future`)."""

    def cancel(self) -> bool:
        """A sent record cannot be taken back (its batch may be on its way to disk)."""
        return False


cdef newfunc _new_object = (<PyTypeObject *>object).tp_new  # what object.__new__ calls
cdef tuple _NO_ARGS = ()


def new_future(batch) -> RecordFuture:
    """The future of a record joining `batch` (accumulator.Batch), sharing its Condition."""
    future = _new_object(RecordFuture, <PyObject *>_NO_ARGS, NULL)
    # Future.__init__'s attributes, without the Condition it would make first
    future._condition = batch.condition
    future._state = _PENDING
    future._result = None
    future._exception = None
    future._waiters = _untracked_list()
    future._done_callbacks = _untracked_list()
    PyObject_GC_UnTrack(<void *>future)  # until resolved
    return future


def resolve(list futures, condition, partition, base, due, list stamps) -> None:
    """Resolve a batch's futures (`condition` theirs) with RecordMetadata(partition,
    base + i, due, stamps[i]), as Future.set_result would, then run their callbacks. Only
    the sender resolves, and a RecordFuture cannot be cancelled: none is done already."""
    cdef Py_ssize_t i
    cdef list called_back = []
    with condition:
        for i in range(len(futures)):
            future = futures[i]
            future._result = _metadata(partition, base + i, due, stamps[i])
            _finish(future, False, called_back)
        condition.notify_all()
    _call_back(called_back)


def fail(list futures, condition, exception: BaseException) -> None:
    """Resolve a batch's futures with `exception`, as Future.set_exception would."""
    cdef list called_back = []
    with condition:
        for future in futures:
            future._exception = exception
            _finish(future, True, called_back)
        condition.notify_all()
    _call_back(called_back)


cdef _call_back(list futures):
    """Run each future's callbacks (Future's own _invoke_callbacks: an Exception is logged
    and the next callback runs). A BaseException (a callback's sys.exit()) does not keep
    the other futures' callbacks from running: the first is raised once all have run."""
    first = None
    for future in futures:
        try:
            future._invoke_callbacks()
        except BaseException as e:
            if first is None:
                first = e
    if first is not None:
        raise first


def abandon(list futures, exception: BaseException) -> None:
    """In a forked child: fail the pending futures of `futures` (a batch's) with `exception`
    at once, without their Condition (a thread of the parent may have held it at the fork:
    they share a new one) and without running their callbacks or telling their waiters
    (the parent's threads, absent here)."""
    condition = None
    for future in futures:
        if future._state == _PENDING:
            if condition is None:
                condition = Condition()
            future._condition = condition
            future._exception = exception
            future._state = _FINISHED
            _track(future)


cdef _finish(future, bint failed, list called_back):
    """The rest of what Future.set_result (or set_exception) does once the result is set,
    but the wake-up and the callbacks, which the caller does for a whole batch; and the
    future back to the collector, with each of its lists that holds anything."""
    future._state = _FINISHED
    _track(future)
    waiters = future._waiters  # concurrent.futures.wait / as_completed
    if waiters:
        _track(waiters)
        for waiter in waiters:
            if failed:
                waiter.add_exception(future)
            else:
                waiter.add_result(future)
    callbacks = future._done_callbacks
    if callbacks:
        _track(callbacks)
        called_back.append(future)


cdef object _metadata(partition, offset, due, stamp):
    """RecordMetadata(partition, offset, due, stamp), made as tuple.__new__ makes a tuple
    subtype's (its type's tp_alloc, then the items) but without a call and an argument
    tuple; untracked: four ints, as the collector would find it."""
    meta = PyType_GenericAlloc(<PyTypeObject *>RecordMetadata, 4)
    _set_item(meta, 0, partition)
    _set_item(meta, 1, offset)
    _set_item(meta, 2, due)
    _set_item(meta, 3, stamp)
    PyObject_GC_UnTrack(<void *>meta)
    return meta


cdef inline void _set_item(meta, Py_ssize_t i, item):
    Py_INCREF(item)
    PyTuple_SET_ITEM(meta, i, item)  # steals the reference
