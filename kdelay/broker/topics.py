"""The topics a broker serves: every topic under ROOT, opened at start and kept open (the
broker holds every partition's lock while it serves).

A topic is a `kdelay.Topic` laid out in ROOT as `Topic.open` lays it out, so a topic written
in process is served as it is, and a served one opens in process once the broker stops.
Cost: `get` is a dict lookup; `create` opens the topic's partitions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..clients.topic import META_DIR, Topic
from ..config import LogConfig
from ..errors import InvalidTopicError


class TopicRegistry:
    """Name -> open Topic, for one ROOT."""

    def __init__(self, root: str):
        self.root = root
        self._topics: dict[str, Topic] = {}

    def open_existing(self) -> None:
        """Open every topic recorded under ROOT."""
        meta = os.path.join(self.root, META_DIR)
        names = sorted(os.listdir(meta)) if os.path.isdir(meta) else []
        for name in names:
            if not name.startswith(".") and not name.endswith(".tmp"):
                self._topics[name] = Topic.open(self.root, name, config=self.config_for(name))

    def config_for(self, name: str) -> LogConfig:
        """The LogConfig a topic is opened with (the topic configs map onto it)."""
        return LogConfig()

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def names(self) -> list[str]:
        return sorted(self._topics)

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._topics.values()))

    def create(self, name: str, partitions: int) -> Topic:
        """Create and open a new topic (InvalidTopicError if it exists or the name is bad)."""
        if name in self._topics:
            raise InvalidTopicError(f"topic {name!r} already exists")
        topic = Topic.open(self.root, name, partitions=partitions, config=self.config_for(name))
        self._topics[name] = topic
        return topic

    def close(self) -> None:
        """Close every topic (each flushes and marks itself cleanly shut down)."""
        errors = []
        for topic in self._topics.values():
            try:
                topic.close()
            except Exception as e:  # close the rest anyway
                errors.append(e)
        self._topics.clear()
        if errors:
            raise errors[0]
