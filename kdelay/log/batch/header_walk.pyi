"""Type stub of header_walk.pyx (compiled): batch headers parsed and CRCs checked in C."""

from typing import Any

import numpy as np
from typing_extensions import Buffer

def walk_headers(buf: Buffer | np.ndarray[Any, Any], start: int, out: np.ndarray[Any, Any],
                 layout: np.ndarray[Any, Any]) -> tuple[int, int]: ...
def check_crcs(buf: Buffer | np.ndarray[Any, Any], headers: np.ndarray[Any, Any],
               layout: np.ndarray[Any, Any], out: np.ndarray[Any, Any],
               tables: bool = False) -> None: ...
