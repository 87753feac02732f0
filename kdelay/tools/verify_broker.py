"""`kdelay verify`'s check of what `kdelay serve` keeps in a topic root beside the
partitions: each topic record (`.kdelay-broker/topics/<topic>`, kdelay/broker/
topic_store.py) parses, names its own topic, and has a topic (its `.kdelay-topics` file)
unless it marks a deletion or a creation that never finished (the broker finishes or drops
those at its next start: reported as information). O(topics)."""

from __future__ import annotations

import os

from ..broker.topic_store import TopicStore
from ..clients.topic import META_DIR
from ..errors import CorruptLogError
from .scanning import VerifyReport


def check_broker_files(root: str) -> VerifyReport | None:
    """A report on ROOT's broker topic records; None when ROOT has none."""
    store = TopicStore(root)
    names = store.names()
    if not names:
        return None
    rep = VerifyReport(store.dir)
    for name in names:
        path = os.path.join(store.dir, name)
        try:
            record = store.read(name)
        except CorruptLogError:
            rep.add(True, path, 0, "broker topic record does not parse (the broker will not "
                    "start until it is repaired or removed)")
            continue
        if record is None:
            continue
        if record.deleting:
            rep.add(False, path, None, f"topic {name!r} is being deleted; the broker's next "
                    "start finishes it")
        elif not os.path.exists(os.path.join(root, META_DIR, name)):
            rep.add(False, path, None, f"topic {name!r} was never created (a CreateTopics "
                    "interrupted); the broker's next start drops this record")
    return rep
