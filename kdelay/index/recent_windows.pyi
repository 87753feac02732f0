"""Type stub of recent_windows.pyx (compiled): the windows a fetch takes of the recent
entries."""

from typing import Any

import numpy as np

from .recent_columns import RecentColumns

_Array = np.ndarray[Any, Any]

def window(entries: RecentColumns, seqs: _Array, now: int, out: _Array) -> int: ...
def arrivals_window(entries: RecentColumns, first: int, after_da: int, after_off: int,
                    now: int, out: _Array) -> int: ...
def due_entries(entries: RecentColumns, after_da: int, after_off: int, now: int,
                out: _Array) -> tuple[int, bool]: ...
