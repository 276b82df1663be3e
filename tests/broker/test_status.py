"""The core's status numbers are RocketMQ's: the gRPC layer sends them unchanged. Errors get
their status by type from one table (``strata.broker.status``), which the Kafka layer maps
to its codes."""

import pytest

from strata.broker.errors import (CorruptJournalError, InvalidGroupError, InvalidMessageError,
                                  InvalidReceiptHandleError)
from strata.broker.kafka import errors as ke
from strata.broker.kafka.api import BadRequestError
from strata.broker.rocketmq.protocol import Code
from strata.broker.status import Status, status_for
from strata.errors import (DiskFullError, InvalidInputError, InvalidTopicError,
                           MessageTooLargeError, PropertiesTooLargeError, StoreClosedError,
                           StrataError, TopicExistsError)
from strata.format.record import encode_properties


def test_every_core_status_is_the_rocketmq_code_of_the_same_name():
    for s in Status:
        assert Code.Value(s.name) == s.value, s.name


@pytest.mark.parametrize("exc, status, kafka", [
    (InvalidTopicError("t"), Status.ILLEGAL_TOPIC, ke.INVALID_TOPIC_EXCEPTION),
    (TopicExistsError("t"), Status.BAD_REQUEST, ke.TOPIC_ALREADY_EXISTS),
    (InvalidGroupError("g"), Status.ILLEGAL_CONSUMER_GROUP, ke.INVALID_GROUP_ID),
    (InvalidReceiptHandleError("h"), Status.INVALID_RECEIPT_HANDLE, ke.INVALID_REQUEST),
    (MessageTooLargeError("body"), Status.MESSAGE_BODY_TOO_LARGE, ke.MESSAGE_TOO_LARGE),
    (PropertiesTooLargeError("p"), Status.MESSAGE_PROPERTIES_TOO_LARGE, ke.MESSAGE_TOO_LARGE),
    (InvalidMessageError(Status.TOPIC_NOT_FOUND, "no"), Status.TOPIC_NOT_FOUND,
     ke.UNKNOWN_TOPIC_OR_PARTITION),
    (InvalidMessageError(Status.ILLEGAL_MESSAGE_TAG, "tag"), Status.ILLEGAL_MESSAGE_TAG,
     ke.INVALID_REQUEST),
    (BadRequestError("frame"), Status.BAD_REQUEST, ke.INVALID_REQUEST),
    (InvalidInputError("x"), Status.BAD_REQUEST, ke.INVALID_REQUEST),
    (DiskFullError(28, "full"), Status.INTERNAL_ERROR, ke.KAFKA_STORAGE_ERROR),
    (CorruptJournalError("bad"), Status.INTERNAL_ERROR, ke.KAFKA_STORAGE_ERROR),
    (StoreClosedError("closed"), Status.INTERNAL_ERROR, ke.NOT_LEADER_OR_FOLLOWER),
    (StrataError("other"), Status.INTERNAL_ERROR, ke.UNKNOWN_SERVER_ERROR),
    (RuntimeError("a bug"), Status.INTERNAL_ERROR, ke.UNKNOWN_SERVER_ERROR),
])
def test_each_error_type_has_one_status_and_one_kafka_code(exc, status, kafka):
    assert status_for(exc) == status
    assert ke.code_for(exc) == kafka


def test_a_subclass_inherits_its_parents_status():
    class NewRefusal(InvalidTopicError):
        pass
    assert status_for(NewRefusal("t")) == Status.ILLEGAL_TOPIC
    assert ke.code_for(NewRefusal("t")) == ke.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("props", [{"p": "v" * 70_000}, {f"p{i}": "v" * 9000 for i in range(5)}])
def test_the_store_says_which_part_of_a_message_is_too_large(props):
    with pytest.raises(PropertiesTooLargeError) as info:
        encode_properties((), None, props)
    assert status_for(info.value) == Status.MESSAGE_PROPERTIES_TOO_LARGE
