"""What every RPC of the RocketMQ service shares: a request refused with a protocol status
and the status of a reply, the client id of a call, a protobuf duration in ms, the clock."""

from __future__ import annotations

import time

from strata.broker.rocketmq.protocol import Code, pb
from strata.broker.status import status_for
from strata.errors import InvalidInputError


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Refused(Exception):
    """A request refused with a protocol status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _status(code: int = Code.OK, message: str = "OK"):
    return pb.Status(code=code, message=message)


def _duration_ms(d) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def _input_error(exc: InvalidInputError) -> Refused:
    """A refused input's answer: its status by type (``strata.broker.status``)."""
    return Refused(status_for(exc), str(exc))


def _client_id(context) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == "x-mq-client-id":
            return v
    return ""
