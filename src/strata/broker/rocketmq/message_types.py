"""Topic message types on the wire: a topic accepts one type (``strata.store.topics.
TopicType``); its route lists that type on every queue, and a send of another type is refused
with ``MESSAGE_PROPERTY_CONFLICT_WITH_TYPE`` naming both. An unknown topic (created by its
first send, which gives it that message's type) lists every type this broker stores."""

from __future__ import annotations

from strata.broker.rocketmq.convert import ACCEPTED_TYPES
from strata.broker.errors import InvalidMessageError
from strata.broker.rocketmq.protocol import Code, MessageType
from strata.store.topics import TopicType

TO_PROTOCOL = {TopicType.NORMAL: MessageType.NORMAL, TopicType.FIFO: MessageType.FIFO,
               TopicType.DELAY: MessageType.DELAY,
               TopicType.TRANSACTION: MessageType.TRANSACTION}
FROM_PROTOCOL = {v: k for k, v in TO_PROTOCOL.items()}


def sent_type(m) -> TopicType:
    """The type of a protocol ``Message``; an unspecified one is told by its fields (a
    message group: FIFO, a delivery timestamp: DELAY, else NORMAL)."""
    sp = m.system_properties
    kind = FROM_PROTOCOL.get(sp.message_type)
    if kind is not None:
        return kind
    if sp.HasField("message_group") and sp.message_group:
        return TopicType.FIFO
    if sp.HasField("delivery_timestamp"):
        return TopicType.DELAY
    return TopicType.NORMAL


def route_types(kind: TopicType | None) -> list[int]:
    """The accepted message types a route lists: the topic's own, or for a topic that does
    not exist yet every type this broker stores."""
    return list(ACCEPTED_TYPES) if kind is None else [TO_PROTOCOL[kind]]


def check_fits(topic: str, kind: TopicType, sent: TopicType) -> None:
    """InvalidMessageError unless a message of type ``sent`` fits a topic of ``kind``."""
    if sent is not kind:
        raise InvalidMessageError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {topic!r} accepts {kind.name} messages; this message is {sent.name} "
            "(strata topics create --type sets a topic's type)")
