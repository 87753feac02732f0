"""`Topic.metrics()`: the partitions' `Log.metrics()` added up.

Every count (an int) is summed over the partitions, nested dicts key by key, so each
consumer group's lag and each queue group's counts are the group's over the whole topic;
what is not a count (a committed key, a queue cursor, an error message, a float) is left
to the per-partition detail under "partitions". Offsets and times are not counts: the
topic's `earliest_pending_deliver_after` is the smallest, its `now` the largest, and the
partitions' offsets are only in their detail.
"""

from __future__ import annotations

__all__ = ["topic_metrics"]

_PER_PARTITION = ("log_start_offset", "log_end_offset", "earliest_pending_deliver_after",
                  "now")


def topic_metrics(name: str, partitions: list[dict]) -> dict:
    """The totals of `partitions` (each a Log.metrics() dict, in partition order), with
    them under "partitions"."""
    out = summed([{k: v for k, v in m.items() if k not in _PER_PARTITION}
                  for m in partitions])
    pending = [m["earliest_pending_deliver_after"] for m in partitions]
    out["earliest_pending_deliver_after"] = min((t for t in pending if t is not None),
                                                default=None)
    out["now"] = max(m["now"] for m in partitions)
    out["topic"] = name
    out["partitions"] = partitions
    return out


def summed(dicts: list[dict]) -> dict:
    """Key by key over `dicts` (keys in first-seen order): the sum where every value is an
    int count, the `summed` of nested dicts, nothing for anything else."""
    out: dict = {}
    for key in dict.fromkeys(k for d in dicts for k in d):
        values = [d[key] for d in dicts if key in d]
        if all(type(v) is int for v in values):
            out[key] = sum(values)
        elif all(isinstance(v, dict) for v in values):
            out[key] = summed(values)
    return out
