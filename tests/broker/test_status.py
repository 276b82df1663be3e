"""The core's status numbers are RocketMQ's: the gRPC layer sends them unchanged."""

from strata.broker.rocketmq.protocol import Code
from strata.broker.status import Status


def test_every_core_status_is_the_rocketmq_code_of_the_same_name():
    for s in Status:
        assert Code.Value(s.name) == s.value, s.name
