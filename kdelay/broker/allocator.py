"""The `kdelay serve` process's memory allocator, set for requests of hundreds of KB.

A Produce request of a few thousand records is a few hundred KB, and answering it makes a
few buffers of that size (the frame, its records, the stored batches); a Fetch answer is
megabytes. glibc's malloc serves blocks over its mmap threshold (128 KB at first) with a
fresh mapping each, and gives heap memory back past its trim threshold, so every such
request page-faulted its buffers in anew: about 0.1 page faults per record produced,
15-25 % of the broker's CPU per record (bench/broker.py). Raising both thresholds keeps
those blocks in the heap, reused request after request. The cost: up to `TRIM` bytes of
freed heap kept by the process rather than returned.

The collector too: once the broker has started, every object it holds so far (modules,
kio's schemas and their readers, the open logs) lives as long as the process, so
`settle_collector` moves them out of the collector's sight (gc.freeze) and lets the
youngest generation grow before a collection: a request's few hundred short-lived objects
are freed by reference counting, and the collections that remain no longer walk the whole
heap (they were a few percent of the broker's CPU under many small requests).

Only `kdelay serve` calls these (the process is the broker's own); `kdelay.Broker` in a
user's process leaves that process's allocator and collector alone. Elsewhere than glibc
the allocator is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger("kdelay.broker")

_M_TRIM_THRESHOLD = -1   # glibc's mallopt parameters (its C header's values)
_M_MMAP_THRESHOLD = -3
MMAP = 32 << 20  # blocks below this come from the heap (glibc's own ceiling for it)
TRIM = 64 << 20  # freed heap kept up to this much


def tune_for_requests() -> bool:
    """Set the thresholds (see the module); True if the allocator took them."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM))
    log.debug("malloc thresholds for large requests: %s", "set" if ok else "refused")
    return ok


GEN0_THRESHOLD = 20_000  # allocations less deallocations between young collections


def settle_collector() -> None:
    """After start-up: freeze what exists (see the module) and collect the young generation
    less often. O(objects) once."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
