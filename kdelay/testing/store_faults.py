"""A fault-injecting layer over the object store (kdelay.remote.store.STORE_OPS), as
kdelay.testing.faults is over kdelay.fsio.

`StoreFaults` wraps every store operation (put, get, get_ranges, size, list, delete,
abort_uploads) so
that it is counted (`ops`: (name, object) in order) and can

- raise `SimulatedCrash` before operation N (`crash_at`), after which every further store
  operation raises it too (the process is dead: nothing more reaches the store);
- fail with RemoteStorageError while `unreachable` is set (a predicate over (operation,
  object name), or True for every operation): the store is down, or refuses.

Combined with a FaultInjector (`files=`), store operations are counted in the injector's
own sequence (as "store.put", ...), so one `crash_at` index runs over every file and store
operation of a protocol, and a crash in either stops both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import RemoteStorageError
from ..remote import store
from .faults import FaultInjector, SimulatedCrash, close_abandoned

if TYPE_CHECKING:
    from ..partition import Log

__all__ = ["StoreFaults", "crash_during"]

OPERATIONS = ("put", "get", "get_ranges", "size", "list", "delete", "abort_uploads")


@dataclass
class StoreFaults:
    """Wraps kdelay.remote.store.STORE_OPS; use as a context manager."""

    crash_at: int | None = None
    unreachable: bool | Callable[[str, str], bool] = False
    files: FaultInjector | None = None
    ops: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._saved: dict[str, Callable] = {}
        if self.files is None:  # counting and crashing on its own: an injector of no files
            self.files = FaultInjector([], crash_at=self.crash_at)
        self._files: FaultInjector = self.files

    @property
    def crashed(self) -> bool:
        return self._files.crashed

    def _step(self, op: str, name: str) -> None:
        self.ops.append((op, name))
        self._files._step("store." + op, name)  # counted and crashed with the files
        down = self.unreachable
        if down is True or (callable(down) and down(op, name)):
            raise RemoteStorageError(f"{op} {name} failed: store unreachable (injected)")

    def _wrap(self, op: str) -> Callable:
        real = self._saved[op]
        if op in ("list", "abort_uploads"):  # of the whole partition: no object named
            def whole(s):
                self._step(op, "")
                return real(s)
            return whole

        def wrapped(s, name, *args):
            self._step(op, name)
            return real(s, name, *args)
        return wrapped

    def __enter__(self) -> StoreFaults:
        for op in OPERATIONS:
            self._saved[op] = store.STORE_OPS[op]
            store.STORE_OPS[op] = self._wrap(op)
        return self

    def __exit__(self, *exc) -> None:
        store.STORE_OPS.update(self._saved)
        self._saved.clear()



def crash_during(directory: str, crash_at: int, mode: str, open_log: Callable[[str], Log],
                 protocol: Callable[[Log], None]) -> tuple[str, str]:
    """Open a log on `directory` (`open_log(directory)`), run `protocol` on it and close it, with file and store
    operations counted in one sequence and a crash before operation `crash_at`; then drop
    the log as the dead process would and turn `directory` into what a crash in `mode`
    leaves. Returns the operation the crash fell on."""
    log = None
    with FaultInjector([directory], crash_at=crash_at, seed=crash_at) as files, \
            StoreFaults(files=files):
        try:
            log = open_log(directory)
            protocol(log)
            log.close()
        except SimulatedCrash:
            pass
    if log is not None and not log._closed:
        close_abandoned(log)
    files.apply_crash(mode)
    return files.ops[crash_at]
