"""Type stub of header_walk.pyx (compiled): batch headers parsed and CRCs checked in C."""

from typing import Any

import numpy as np
from typing_extensions import Buffer

# the rows of walk_headers' output (header_walk.pxd's cpdef enum)
H_REL: int
H_BASE_OFFSET: int
H_SIZE: int
H_LAST_OFFSET_DELTA: int
H_BASE_TIMESTAMP: int
H_MAX_TIMESTAMP: int
H_DELIVER_AFTER: int
H_RECORD_COUNT: int
H_CRC: int
HEADER_ROWS: int

def walk_headers(buf: Buffer | np.ndarray[Any, Any], start: int, out: np.ndarray[Any, Any],
                 layout: np.ndarray[Any, Any]) -> tuple[int, int]: ...
def check_crcs(buf: Buffer | np.ndarray[Any, Any], headers: np.ndarray[Any, Any],
               layout: np.ndarray[Any, Any], out: np.ndarray[Any, Any],
               tables: bool = False) -> None: ...
