"""`kdelay verify`'s check of a partition's due-order view (`delivery-offsets.view`, the
broker's delivery offsets: kdelay/broker/view_file.py): the file's own checks (header,
each entry's CRC, gapless delivery offsets, increasing keys), and each entry against the
log: the records it numbers, where the log still holds them, are in one batch with the
entry's deliverAfter. A torn tail is reported as information (the broker cuts it off at its
next start and numbers those records again, identically), as is a file never synced
(`delivery-offsets.view.pending`, checked the same way where it reads soundly).
O(entries * log batches) in numpy's sorted searches."""

from __future__ import annotations

import os

import numpy as np

from ..broker.view_file import ENTRY_SIZE, HEADER_SIZE, PENDING_SUFFIX, VIEW_FILE, read_view
from .scanning import VerifyReport


def check_view(rep: VerifyReport, directory: str,
               batches: list[tuple[int, int, int]]) -> None:
    """Check the view file of `directory` (if any) against the log's batches, given as
    (base offset, last offset, deliverAfter) in offset order, from every local segment."""
    path = os.path.join(directory, VIEW_FILE)
    pending = not os.path.exists(path)
    if pending:
        path += PENDING_SUFFIX  # a view never synced (view_file.py)
        if not os.path.exists(path):
            return
    try:
        reading = read_view(path)
    except OSError as e:
        rep.add(True, path, None, f"due-order view unreadable: {e}")
        return
    if pending:
        if reading.damage is not None or reading.first_delivery:
            rep.add(False, path, reading.damage_at, "due-order view never synced and not "
                    "all sound (a crash before its first fsync); the broker numbers what "
                    "it cannot read again, as it was")
            return
        rep.add(False, path, None, "due-order view never synced (a crash before its first "
                "sync); the broker goes on from it and syncs it")
    if reading.damage is not None:
        rep.add(True, path, reading.damage_at, f"due-order view damaged: {reading.damage} "
                "(the broker cuts it off only where numbering the log again gives every "
                "sound entry after it exactly; else it refuses to serve this partition's "
                "delivery offsets)")
    elif reading.torn_at is not None:
        rep.add(False, path, reading.torn_at, "due-order view has a torn tail (a crash "
                "mid-append); the broker cuts it off and numbers those records again")
    rows = reading.rows
    if not len(rows) or not batches:
        return
    base, last, da = (np.array(c, np.int64) for c in zip(*batches, strict=True))
    first = rows["first"].astype(np.int64)
    end = first + rows["count"].astype(np.int64) - 1
    i = np.searchsorted(base, first, side="right") - 1
    held = (i >= 0) & (first <= last[np.maximum(i, 0)])  # the log still holds the first
    ok = ~held | ((end <= last[np.maximum(i, 0)]) & (da[np.maximum(i, 0)] == rows["deliver_after"]))
    for j in np.flatnonzero(~ok)[:10].tolist():
        rep.add(True, path, HEADER_SIZE + j * ENTRY_SIZE,
                f"due-order view entry {j} numbers offsets {int(first[j])}..{int(end[j])} "
                f"due at {int(rows['deliver_after'][j])}, which the log holds otherwise")
