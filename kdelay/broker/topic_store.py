"""What the broker remembers of each topic beyond its partitions: its topic id (a UUID, as
Kafka's Metadata hands out and Fetch v13+ names topics by) and its config overrides.

On disk: `ROOT/.kdelay-broker/topics/<topic name>`, one small JSON file per topic,
replaced atomically (fsio.atomic_write: written to .tmp, fsynced, renamed, directory
fsynced), so a crash leaves the old or the new state, never neither:

    {"format": "kdelay-broker-topic v1", "name": "...", "topic_id": "<uuid>",
     "configs": {"retention.ms": "60000", ...}, "deleting": false}

`deleting: true` marks a DeleteTopics that had begun: the next start finishes it. The
topic's partition count stays where `Topic.open` keeps it (`ROOT/.kdelay-topics/<name>`).
Cost: one small file read per topic at start, one atomic write per change.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field

from .. import fsio
from ..errors import CorruptLogError

BROKER_DIR = ".kdelay-broker"
TOPICS_DIR = "topics"
_FORMAT = "kdelay-broker-topic v1"


@dataclass
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str] = field(default_factory=dict)
    deleting: bool = False


class TopicStore:
    """The per-topic files under ROOT/.kdelay-broker/topics."""

    def __init__(self, root: str):
        self.root = root
        self.dir = os.path.join(root, BROKER_DIR, TOPICS_DIR)

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def names(self) -> list[str]:
        """Every topic with a file (deleting ones included)."""
        if not os.path.isdir(self.dir):
            return []
        return sorted(n for n in os.listdir(self.dir) if not n.endswith(".tmp"))

    def read(self, name: str) -> TopicRecord | None:
        """The topic's record, None without one; CorruptLogError if it does not parse."""
        path = self._path(name)
        raw = fsio.read_small(path)
        if raw is None:
            return None
        try:
            body = json.loads(raw)
            ok = body.get("format") == _FORMAT and body.get("name") == name
            record = TopicRecord(name, uuid.UUID(body["topic_id"]),
                                 {str(k): str(v) for k, v in body["configs"].items()},
                                 bool(body.get("deleting", False)))
        except (ValueError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            raise CorruptLogError(f"broker topic file {path} is corrupt", path, 0)
        return record

    def write(self, record: TopicRecord) -> None:
        """Replace the topic's record atomically."""
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir, exist_ok=True)
            fsio.fsync_dir(os.path.dirname(self.dir))
            fsio.fsync_dir(self.root)
        body = {"format": _FORMAT, "name": record.name, "topic_id": str(record.topic_id),
                "configs": record.configs, "deleting": record.deleting}
        fsio.atomic_write(self._path(record.name), (json.dumps(body) + "\n").encode())

    def remove(self, name: str) -> None:
        path = self._path(name)
        if os.path.exists(path):
            fsio.unlink(path)
            fsio.fsync_dir(self.dir)


def new_topic_id() -> uuid.UUID:
    """A random topic id (never the all-zero UUID, which Kafka reads as 'no id')."""
    while True:
        topic_id = uuid.uuid4()
        if topic_id.int:
            return topic_id
