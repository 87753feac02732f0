"""Type stub of served_header.pyx (compiled): the header a stored batch is served with."""

from typing import Any

SERVED_HEAD: int
STORED_REST: int

def served_header(stored: Any, base_offset: int) -> bytes: ...
