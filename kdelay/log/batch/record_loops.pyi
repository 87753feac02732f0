"""Type stub of record_loops.pyx (compiled): the records section walked and written in C."""

from typing import Any, Final

import numpy as np
from typing_extensions import Buffer

_Array = np.ndarray[Any, Any]
_Bytes = Buffer | _Array

TIMESTAMPS_VARY: Final[int]
NULL_KEYS: Final[int]
NULL_VALUES: Final[int]
HEADERS: Final[int]
SAME_HEADERS: Final[int]
FIELD_FMT: Final[int]
RECORD_OVERHEAD: Final[int]
STATUS_MESSAGES: dict[int, str]

def scan_records(buf: _Bytes, start: int, n: int, end: int, base_ts: int, out: _Bytes,
                 fmt1_at: int, fmt2_at: int) -> tuple[int, int, int, int, int, int]: ...
def scan_layout(n: int) -> tuple[int, int, int]: ...
def scan_chunk(buf: _Bytes, header_size: int, starts: _Array, sizes: _Array, counts: _Array,
               base_ts: _Array, timestamps: _Array, kpos: _Array, klen: _Array, vpos: _Array,
               vlen: _Array, ok: _Array) -> None: ...
def encode_bound(head: int, n: int, payload_bytes: int, header_bytes: int) -> int: ...
def encode_records(head: int, lengths: _Array, payloads: _Bytes, deltas: _Array | None,
                   header_lengths: _Array | None, headers: _Bytes | None,
                   out: _Bytes) -> tuple[int, int]: ...
def gather_payloads(buf: _Bytes, positions: _Array, lengths: _Array, offsets: _Array,
                    data: _Bytes) -> int: ...
