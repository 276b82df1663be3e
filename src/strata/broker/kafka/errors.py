"""Kafka error codes, and the code each strata exception is answered with.

Handlers catch a ``StrataError`` per partition (or per topic) and answer ``code_for(exc)``.
An error gets its core status by type (``strata.broker.status.status_for``, the one table of
it), which ``STATUS_CODES`` turns into Kafka's code; ``KAFKA_BY_TYPE`` holds only what Kafka
tells apart and the core status does not (an existing topic, the storage's states). Both go
by exception type, so a new subclass inherits its parent's code.
"""

from __future__ import annotations

from strata.broker.status import Status, by_type, status_for
from strata.errors import (CorruptStoreError, DiskFullError, ReadOnlyStoreError,
                           StoreClosedError, TopicExistsError)

# the codes the listener answers (Kafka's numbers, from its protocol documentation)
UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_FETCH_SIZE = 4
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_TIMESTAMP = 32
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
POLICY_VIOLATION = 44
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
UNSUPPORTED_COMPRESSION_TYPE = 76
SASL_AUTHENTICATION_FAILED = 58
KAFKA_STORAGE_ERROR = 56
UNKNOWN_PRODUCER_ID = 59
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
INVALID_RECORD = 87
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNKNOWN_TOPIC_ID = 100

STATUS_CODES: dict[int, int] = {
    Status.ILLEGAL_TOPIC: INVALID_TOPIC_EXCEPTION,
    Status.TOPIC_NOT_FOUND: UNKNOWN_TOPIC_OR_PARTITION,
    Status.ILLEGAL_CONSUMER_GROUP: INVALID_GROUP_ID,
    Status.MESSAGE_BODY_TOO_LARGE: MESSAGE_TOO_LARGE,
    Status.MESSAGE_PROPERTIES_TOO_LARGE: MESSAGE_TOO_LARGE,
    Status.UNAUTHORIZED: SASL_AUTHENTICATION_FAILED,
    Status.FORBIDDEN: TOPIC_AUTHORIZATION_FAILED,
    Status.NOT_FOUND: UNKNOWN_TOPIC_OR_PARTITION,
}

# what Kafka answers apart from the core status of the error
KAFKA_BY_TYPE: dict[type, int] = {
    TopicExistsError: TOPIC_ALREADY_EXISTS,
    DiskFullError: KAFKA_STORAGE_ERROR,
    CorruptStoreError: KAFKA_STORAGE_ERROR,
    ReadOnlyStoreError: KAFKA_STORAGE_ERROR,
    StoreClosedError: NOT_LEADER_OR_FOLLOWER,     # stopping: clients retry elsewhere/later
}


def code_for(exc: BaseException) -> int:
    """The Kafka error code that answers ``exc``."""
    code = by_type(KAFKA_BY_TYPE, exc, None)
    if code is not None:
        return code
    status = status_for(exc)
    return STATUS_CODES.get(status, INVALID_REQUEST if status < Status.INTERNAL_ERROR
                            else UNKNOWN_SERVER_ERROR)
