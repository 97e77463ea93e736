"""Topic ids and names seen in upstream responses: one cache per gateway (``Gateway.topic_ids``),
reached by the enforcements through ``AuthHelper.topics``.

Requests from newer clients name topics by id (Fetch v13+, OffsetCommit v10,
DeleteTopics by id, share APIs); the authorizer needs names.  kgw learns the
pairs from the Metadata, DescribeTopicPartitions and CreateTopics responses it
forwards; an id it has never seen resolves to None (UNKNOWN_TOPIC_ID, as Kafka).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from uuid import UUID

__all__ = ["TopicCache"]


class TopicCache:
    """Topic names and ids seen in upstream responses (bounded, least recently learned dropped first)."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self.max_entries = max_entries
        #: Trio and the data-plane thread both learn; lookups (one dict read) need no lock
        self._lock = threading.Lock()
        self._names: OrderedDict[str, UUID | None] = OrderedDict()
        self._ids: dict[UUID, str] = {}

    def learn(self, name: str | None, topic_id: UUID | None) -> None:
        if not name:
            return
        with self._lock:
            self._learn(name, topic_id)

    def _learn(self, name: str, topic_id: UUID | None) -> None:
        old = self._names.pop(name, None)
        if old is not None and topic_id is None:
            topic_id = old
        self._names[name] = topic_id
        if topic_id is not None:
            self._ids[topic_id] = name
        while len(self._names) > self.max_entries:
            _, dropped = self._names.popitem(last=False)
            if dropped is not None:
                self._ids.pop(dropped, None)

    def forget(self, name: str) -> None:
        """The upstream said ``name`` does not exist (ids are never reused, so the id mapping stays)."""
        with self._lock:
            self._names.pop(name, None)

    def exists(self, name: str) -> bool:
        return name in self._names

    def name_of(self, topic_id: UUID) -> str | None:
        return self._ids.get(topic_id)

    def clear(self) -> None:
        with self._lock:
            self._names.clear()
            self._ids.clear()

