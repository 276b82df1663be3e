"""Status codes of the protocol-neutral broker core, and the status of each error.

Core modules refuse a request with ``InvalidMessageError(status, text)``; other errors get
their status by type from ``STATUS_BY_TYPE`` (``status_for``), the one table of it: each
protocol layer turns the status into its own answer (``strata.broker.rocketmq`` sends it as
is, ``strata.broker.kafka.errors`` maps it to a Kafka error code). The values are RocketMQ 5's
``apache.rocketmq.v2.Code`` numbers, so the gRPC layer needs no table;
tests/broker/test_status.py checks that they still agree with the generated stubs.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Mapping, TypeVar

from strata.broker.errors import (InvalidGroupError, InvalidMessageError,
                                  InvalidReceiptHandleError)
from strata.errors import (InvalidInputError, InvalidTopicError, MessageTooLargeError,
                           PropertiesTooLargeError, StrataError)

V = TypeVar("V")


class Status(IntEnum):
    OK = 20000
    BAD_REQUEST = 40000
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    UNAUTHORIZED = 40100
    FORBIDDEN = 40300
    NOT_FOUND = 40400
    TOPIC_NOT_FOUND = 40402
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_PROPERTIES_TOO_LARGE = 43101
    INTERNAL_ERROR = 50000


def by_type(table: Mapping[type, V], exc: BaseException, default: V) -> V:
    """The value ``table`` gives the nearest class of ``exc`` (its own class, then its bases
    in method resolution order): a subclass inherits its parent's entry."""
    for klass in type(exc).__mro__:
        found = table.get(klass)
        if found is not None:
            return found
    return default


STATUS_BY_TYPE: dict[type, Status] = {
    InvalidTopicError: Status.ILLEGAL_TOPIC,
    InvalidGroupError: Status.ILLEGAL_CONSUMER_GROUP,
    InvalidReceiptHandleError: Status.INVALID_RECEIPT_HANDLE,
    PropertiesTooLargeError: Status.MESSAGE_PROPERTIES_TOO_LARGE,
    MessageTooLargeError: Status.MESSAGE_BODY_TOO_LARGE,
    InvalidInputError: Status.BAD_REQUEST,
    StrataError: Status.INTERNAL_ERROR,
}


def status_for(exc: BaseException) -> int:
    """The status that answers ``exc``: a core refusal's own code, else its type's entry of
    ``STATUS_BY_TYPE`` (INTERNAL_ERROR for anything else)."""
    if isinstance(exc, InvalidMessageError):
        return exc.code
    return by_type(STATUS_BY_TYPE, exc, Status.INTERNAL_ERROR)
