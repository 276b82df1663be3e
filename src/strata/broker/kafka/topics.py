"""Topic and partition lookups shared by the Kafka handlers: a Kafka topic is a strata topic,
its partitions are the topic's queues; auto-creation follows ``--no-auto-create``."""

from __future__ import annotations

from strata.broker.kafka import errors as ke
from strata.broker.names import check_topic
from strata.errors import StrataError


def partitions(broker, topic: str, *, create: bool) -> tuple[int, int]:
    """(error code, partition count) of ``topic``; creates it (default queue count) when
    ``create`` and the broker auto-creates."""
    try:
        check_topic(topic)
    except StrataError:
        return ke.INVALID_TOPIC_EXCEPTION, 0
    store = broker.store
    n = store.queue_count(topic)
    if n == 0 and create and broker.auto_create:
        try:
            store.create_topic(topic)
        except StrataError as exc:
            return ke.code_for(exc), 0
        n = store.queue_count(topic)
    if n == 0:
        return ke.UNKNOWN_TOPIC_OR_PARTITION, 0
    return ke.NONE, n
