"""Retention, compaction and the tiered-storage sync, run by the broker on its own, every
`log.retention.check.interval.ms` (broker-wide, default 300000, Kafka's name), as Kafka's
log manager does.

Each pass visits every partition of every topic once, on a worker thread; before a
partition's pass, its due-order view numbers what is due and fsyncs (served.py's
`before_retention`) (the engine's
calls block: `Log.enforce_retention`, which also compacts when the topic's
`kdelay.compaction.min.ratio` > 0, and `Log.sync_remote` for tiered topics); each takes the
partition's lock only for its own steps, so produce and fetch go on meanwhile. A failure of
one partition is logged and the pass goes on. Cost per pass: the engine's, O(segments) per
partition when there is nothing to do.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..errors import KdelayError

if TYPE_CHECKING:
    from .settings import BrokerSettings
    from .state import BrokerState

log = logging.getLogger("kdelay.broker")


def interval_s(settings: BrokerSettings) -> float:
    return int(settings.config("log.retention.check.interval.ms")) / 1000


def run_pass(broker: BrokerState) -> int:
    """One pass over every partition (blocking: run it off the event loop). Returns the
    segments retention deleted."""
    deleted = 0
    for name in broker.topics.names():
        topic = broker.topics.get(name)
        if topic is None:  # deleted meanwhile
            continue
        for i, plog in enumerate(topic.logs):
            try:
                # the delivery offsets of what is due are numbered and fsynced first, so
                # that no record retention or compaction removes loses its number (served.py)
                broker.served.before_retention(name, i)
                deleted += plog.enforce_retention()
                if plog.config.remote_storage is not None:
                    plog.sync_remote()
            except KdelayError as e:  # closed by a reopen or delete meanwhile, a store down
                log.warning("maintenance of %s-%d: %s", name, i, e)
    return deleted


async def maintain(broker: BrokerState) -> None:
    """Run passes every interval until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval_s(broker.settings))
        try:
            deleted = await loop.run_in_executor(None, run_pass, broker)
            if deleted:
                log.info("retention deleted %d segments", deleted)
        except Exception:
            log.exception("maintenance pass failed")
