"""Topic ids (Kafka's topic UUIDs): Metadata hands them out and Fetch v13+ names topics by
them. A registry that keeps ids of its own (`topic_id(name)`, `by_id(id)`) is asked; until
the registry has them, a topic's id is derived from its name (a name-based UUID, the same
across restarts; a topic deleted and created again under the same name gets the same id,
which Kafka would not give it)."""

from __future__ import annotations

import uuid

_NAMESPACE = uuid.UUID("6b64656c-6179-4b61-666b-612d746f7069")


def topic_id(name: str) -> uuid.UUID:
    """The id of topic `name`. Cost: one SHA-1 of the name (cached by callers)."""
    return uuid.uuid5(_NAMESPACE, name)


class TopicIds:
    """id <-> name for the topics of a registry (its own ids where it keeps them)."""

    def __init__(self, registry: object = None) -> None:
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}
        self._registry_id = getattr(registry, "topic_id", None)
        self._registry_name = getattr(registry, "by_id", None)

    def id_of(self, name: str) -> uuid.UUID:
        if self._registry_id is not None:
            kept = self._registry_id(name)
            if kept is not None:
                return kept
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = topic_id(name)
            self._names[found] = name
        return found

    def name_of(self, ident: uuid.UUID, names: list[str]) -> str | None:
        """The name of the topic with id `ident` among `names` (None: none has it)."""
        if self._registry_name is not None:
            return self._registry_name(ident)
        found = self._names.get(ident)
        if found is None:
            for name in names:
                self.id_of(name)
            found = self._names.get(ident)
        return found if found in names else None
