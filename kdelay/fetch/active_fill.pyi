"""Type stub of active_fill.pyx (compiled): a page of due records from the active
segment's recent entries."""

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from ..index.recent_columns import RecentColumns
from ..log.segments.mapped_file import MappedFile
from ..records import FetchedRecord, Header

FILLED: Final[int]
GENERAL: Final[int]
STOPPED: Final[int]
NOTHING_AFTER: Final[int]

def fill_active(out: list[FetchedRecord], entries: RecentColumns, source: MappedFile,
                limit: int, after_da: int, after_off: int, now: int, max_records: int,
                max_bytes: int, max_entries: int, gone_a: np.ndarray[Any, Any] | None,
                gone_b: np.ndarray[Any, Any] | None, record_type: type[FetchedRecord],
                no_headers: list[Header],
                shared_headers: Callable[[bytes], list[Header]]) -> tuple[int, int]: ...
