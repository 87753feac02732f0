"""Type stub of append_notices.pyx (compiled): what a Log tells the rest once an append
lands."""

import threading
from collections.abc import Callable

from ..records import AppendResult
from .due_order import DueOrderReader
from .long_poll import ActivitySignal

AppendListener = Callable[[AppendResult], None]

class AppendNotices:
    signal: ActivitySignal
    @property
    def listeners(self) -> list[AppendListener]: ...
    def __init__(self, lock: threading.RLock, due_order: DueOrderReader) -> None: ...
    def under_lock(self, result: AppendResult) -> AppendResult: ...
    def after(self, result: AppendResult) -> AppendResult: ...
