"""Topic ids (Kafka's topic UUIDs): Metadata hands them out and Fetch v13+ names topics by
them. Until the topic registry keeps ids of its own, a topic's id is derived from its name
(a name-based UUID, the same across restarts; a topic deleted and created again under the
same name gets the same id, which Kafka would not give it)."""

from __future__ import annotations

import uuid

_NAMESPACE = uuid.UUID("6b64656c-6179-4b61-666b-612d746f7069")


def topic_id(name: str) -> uuid.UUID:
    """The id of topic `name`. Cost: one SHA-1 of the name (cached by callers)."""
    return uuid.uuid5(_NAMESPACE, name)


class TopicIds:
    """id -> name for the topics of a registry, refreshed when an id is not found."""

    def __init__(self) -> None:
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}

    def id_of(self, name: str) -> uuid.UUID:
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = topic_id(name)
            self._names[found] = name
        return found

    def name_of(self, ident: uuid.UUID, names: list[str]) -> str | None:
        """The name of the topic with id `ident` among `names` (None: none has it)."""
        found = self._names.get(ident)
        if found is None:
            for name in names:
                self.id_of(name)
            found = self._names.get(ident)
        return found if found in names else None
