"""Reading the shared metadata topic's offsets right after creating it: on a three-broker
cluster the new partition is not in the client's metadata at once (a CI run met
_UNKNOWN_PARTITION and the gateway refused to start).  Such answers are waited out, up to the
load timeout; anything else fails at once."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from metadata.kafka_topic import KafkaMetadataStore
from metadata.store import MetadataStoreUnavailableError


class _Consumer:
    def __init__(self, failures: list[int]) -> None:
        self.failures = list(failures)
        self.calls = 0

    def get_watermark_offsets(self, partition, timeout: float, cached: bool):
        self.calls += 1
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))
        return 3, 17


def _store(load_timeout_s: float = 5.0) -> KafkaMetadataStore:
    store = object.__new__(KafkaMetadataStore)  # only what _watermarks reads
    store.settings = SimpleNamespace(load_timeout_s=load_timeout_s)
    store._stop = threading.Event()
    return store


@pytest.mark.parametrize("code", [KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                                  KafkaError.LEADER_NOT_AVAILABLE])
def test_a_partition_not_known_yet_is_waited_for(code):
    consumer = _Consumer([code, code])
    assert _store()._watermarks(consumer, "__kgw_md") == (3, 17)
    assert consumer.calls == 3


def test_another_error_fails_at_once_naming_the_topic():
    consumer = _Consumer([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(MetadataStoreUnavailableError, match="cannot read the offsets of __kgw_md"):
        _store()._watermarks(consumer, "__kgw_md")
    assert consumer.calls == 1


def test_waiting_ends_at_the_load_timeout():
    consumer = _Consumer([KafkaError._UNKNOWN_PARTITION] * 1000)
    with pytest.raises(MetadataStoreUnavailableError):
        _store(load_timeout_s=0.0)._watermarks(consumer, "__kgw_md")
    assert consumer.calls <= 2
