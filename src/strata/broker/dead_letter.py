"""Dead letters: a message a group failed to consume ``max attempts`` times is copied to the
topic ``%DLQ%<group>`` (RocketMQ's name) and leaves the group's flight."""

from __future__ import annotations

import hashlib

from strata.errors import InvalidTopicError
from strata.format.record import encode_topic
from strata.store.message import Message, StoredMessage

DLQ_PREFIX = "%DLQ%"
PROP_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
PROP_ORIGIN_QUEUE = "DLQ_ORIGIN_QUEUE"
PROP_ORIGIN_OFFSET = "DLQ_ORIGIN_OFFSET"


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``; a group too long for a topic name gets its SHA-1 instead."""
    name = DLQ_PREFIX + group
    try:
        encode_topic(name)
    except InvalidTopicError:
        name = DLQ_PREFIX + hashlib.sha1(group.encode()).hexdigest()
    return name


def dead_letter(m: StoredMessage, group: str, attempts: int) -> Message:
    """The copy of ``m`` that goes to the group's dead-letter topic."""
    props = m.properties
    props[PROP_ORIGIN_TOPIC] = m.topic
    props[PROP_ORIGIN_QUEUE] = str(m.queue_id)
    props[PROP_ORIGIN_OFFSET] = str(m.queue_offset)
    return Message(dlq_topic(group), m.body, keys=m.keys, tags=m.tags, properties=props,
                   born_timestamp=m.born_timestamp, reconsume_times=attempts)
