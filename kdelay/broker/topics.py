"""The topics a broker serves: every topic under ROOT, opened at start and kept open (the
broker holds every partition's lock while it serves), with its topic id and configs.

A topic is a `kdelay.Topic` laid out in ROOT as `Topic.open` lays it out, so a topic written
in process is served as it is (it gets a topic id at the broker's first start), and a
served one opens in process once the broker stops. Ids and config overrides persist in
topic_store.py's files.

Handlers look a topic up per request (`get`, `by_id`) and never keep a `Topic` across
awaits: a config change that alters the LogConfig reopens the topic's partitions (closed,
then opened with the new LogConfig: the engine fixes a Log's config at open), and a
DeleteTopics closes them. Whoever must know (a fetch session, a group) registers with
`add_listener(fn)`, called as fn(name, event) with event "reopened" or "deleted".

Costs: `get`/`by_id` a dict lookup; `create` an atomic write and a Log.open per partition;
`alter` an atomic write and, if the LogConfig changed, a close and reopen of the topic (a
flush, and a clean reopen that scans nothing); `delete` closes the topic and removes its
directories (proportional to their files).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping

from .. import fsio
from ..clients.topic import META_DIR, Topic, validate_topic_name
from ..config import LogConfig
from ..errors import InvalidTopicError
from .topic_configs import SPECS, TopicConfigs
from .topic_store import TopicRecord, TopicStore, new_topic_id

log = logging.getLogger("kdelay.broker")

TopicListener = Callable[[str, str], None]


class TopicRegistry:
    """Name -> open Topic, its id and its configs, for one ROOT."""

    def __init__(self, root: str, broker_defaults: Mapping[str, str] | None = None):
        self.root = root
        self.broker_defaults = dict(broker_defaults or {})
        self.store = TopicStore(root)
        self._topics: dict[str, Topic] = {}
        self._records: dict[str, TopicRecord] = {}
        self._configs: dict[str, TopicConfigs] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self._listeners: list[TopicListener] = []

    # ------------------------------------------------------------------ start

    def open_existing(self) -> None:
        """Finish what a crash interrupted (a deletion under way; a creation whose topic
        was never made), give an id to every topic without one, open every topic."""
        meta = os.path.join(self.root, META_DIR)
        names = {n for n in (os.listdir(meta) if os.path.isdir(meta) else [])
                 if not n.startswith(".") and not n.endswith(".tmp")}
        for name in self.store.names():
            record = self.store.read(name)
            if record is not None and record.deleting:
                self._remove_files(name)
                names.discard(name)
            elif name not in names:  # CreateTopics crashed before the topic existed:
                self._remove_files(name)  # anything made of it goes too
        for name in sorted(names):
            record = self.store.read(name)
            if record is None:  # written in process, or by the Spark writer
                record = TopicRecord(name, new_topic_id())
                self.store.write(record)
            configs = TopicConfigs(record.configs, self.broker_defaults)
            self._add(record, configs, Topic.open(self.root, name,
                                                  config=configs.log_config()))

    def _add(self, record: TopicRecord, configs: TopicConfigs, topic: Topic) -> None:
        self._topics[record.name] = topic
        self._records[record.name] = record
        self._configs[record.name] = configs
        self._by_id[record.topic_id] = record.name

    # ------------------------------------------------------------------ lookups

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def topic_id(self, name: str) -> uuid.UUID | None:
        record = self._records.get(name)
        return None if record is None else record.topic_id

    def by_id(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id (None: no such topic)."""
        return self._by_id.get(topic_id)

    def configs(self, name: str) -> TopicConfigs | None:
        return self._configs.get(name)

    def configs_of(self, name: str) -> dict[str, str]:
        """Every topic config's value as text (the operations endpoint shows them); {}
        for a topic the broker does not serve."""
        configs = self._configs.get(name)
        if configs is None:
            return {}
        return {spec: configs.text(spec)[0] for spec in SPECS}

    def config_for(self, name: str) -> LogConfig:
        """The LogConfig the topic is (or a new one would be) opened with."""
        configs = self._configs.get(name)
        return (configs or TopicConfigs({}, self.broker_defaults)).log_config()

    def names(self) -> list[str]:
        return sorted(self._topics)

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._topics.values()))

    def add_listener(self, listener: TopicListener) -> None:
        self._listeners.append(listener)

    def _tell(self, name: str, event: str) -> None:
        for listener in self._listeners:
            try:
                listener(name, event)
            except Exception:  # one listener's failure must not stop the change
                log.exception("topic listener failed on %s %s", event, name)

    # ------------------------------------------------------------------ changes

    def check_new(self, name: str, partitions: int, configs: Mapping[str, str]
                  ) -> TopicConfigs:
        """What `create` would check, without creating: InvalidTopicError (a bad or taken
        name, a partition count below 1) or InvalidConfigError."""
        validate_topic_name(name)
        if name in self._topics:
            raise InvalidTopicError(f"topic {name!r} already exists")
        if partitions < 1:
            raise InvalidTopicError(f"a topic needs at least 1 partition, got {partitions}")
        return TopicConfigs(configs, self.broker_defaults)

    def create(self, name: str, partitions: int, configs: Mapping[str, str] | None = None
               ) -> Topic:
        """Create and open a new topic with these config overrides. Its record (id and
        configs) is written first: a crash before the topic exists leaves a record that
        the next start drops."""
        checked = self.check_new(name, partitions, configs or {})
        record = TopicRecord(name, new_topic_id(), dict(configs or {}))
        self.store.write(record)
        try:
            topic = Topic.open(self.root, name, partitions=partitions,
                               config=checked.log_config())
        except BaseException:
            self.store.remove(name)
            raise
        self._add(record, checked, topic)
        return topic

    def add_partitions(self, name: str, count: int) -> None:
        """Grow a topic to `count` partitions (Topic.add_partitions: more only)."""
        topic = self._require(name)
        topic.add_partitions(count, self._configs[name].log_config())

    def check_alter(self, name: str, changes: Mapping[str, str | None]) -> TopicConfigs:
        """The topic's configs with `changes` (None: back to the default), checked."""
        self._require(name)
        return self._configs[name].with_changes(changes)

    def alter(self, name: str, changes: Mapping[str, str | None]) -> None:
        """Apply config changes: persisted atomically, then in effect. Changes of the
        LogConfig reopen the topic's partitions; the produce-path configs
        (delayed.delivery.max.spread.ms, message.timestamp.type) apply at once."""
        new = self.check_alter(name, changes)
        record = self._records[name]
        updated = TopicRecord(name, record.topic_id, new.overrides)
        self.store.write(updated)
        self._records[name] = updated
        old = self._configs[name]
        self._configs[name] = new
        if new.log_config() != old.log_config():
            self._topics[name].close()
            self._topics[name] = Topic.open(self.root, name, config=new.log_config())
            self._tell(name, "reopened")

    def delete(self, name: str) -> None:
        """Delete a topic: marked deleting (atomically), closed, its files removed, its
        record removed. A crash part way is finished by the next start."""
        topic = self._require(name)
        record = self._records[name]
        self.store.write(TopicRecord(name, record.topic_id, record.configs, deleting=True))
        del self._topics[name], self._records[name], self._configs[name]
        del self._by_id[record.topic_id]
        self._tell(name, "deleted")  # what serves it lets go first
        try:
            topic.close()
        finally:
            self._remove_files(name)

    def _remove_files(self, name: str) -> None:
        """Remove a topic's metadata, partition directories and record, in that order (the
        metadata first: a directory without it is never opened as the topic again)."""
        meta = os.path.join(self.root, META_DIR, name)
        if os.path.exists(meta):
            fsio.unlink(meta)
            fsio.fsync_dir(os.path.dirname(meta))
        prefix = name + "-"
        for entry in os.listdir(self.root):
            tail = entry[len(prefix):]
            if entry.startswith(prefix) and tail.isdigit() and \
                    os.path.isdir(os.path.join(self.root, entry)):
                shutil.rmtree(os.path.join(self.root, entry))
        fsio.fsync_dir(self.root)
        self.store.remove(name)

    def _require(self, name: str) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            raise InvalidTopicError(f"no topic {name!r}")
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
