"""The embedded API's value types: what you put, what a put returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from operator import itemgetter
from typing import Mapping, Sequence

from strata.errors import InvalidInputError
from strata.format.record import Host, StoredMessage  # noqa: F401  (re-exported)


class PutStatus(enum.Enum):
    OK = "OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"


@dataclass(slots=True)
class Message:
    """A message to append. ``keys`` are indexed for ``query``; ``tags`` filter ``get``."""

    topic: str
    body: bytes
    keys: Sequence[str] = ()
    tags: str | None = None
    properties: Mapping[str, str] | None = None
    queue_id: int | None = None
    shard_key: str | None = None
    born_timestamp: int | None = None
    flag: int = 0
    born_host: Host | None = None
    reconsume_times: int = 0
    sys_flag: int = 0
    prepared_transaction_offset: int = 0

    def __init__(self, topic: str, body: bytes, *, keys: Sequence[str] = (),
                 tags: str | None = None, properties: Mapping[str, str] | None = None,
                 queue_id: int | None = None, shard_key: str | None = None,
                 born_timestamp: int | None = None, flag: int = 0,
                 born_host: Host | None = None, reconsume_times: int = 0,
                 sys_flag: int = 0, prepared_transaction_offset: int = 0) -> None:
        if flag or reconsume_times or sys_flag or prepared_transaction_offset:
            for name, v, lo, hi in (("flag", flag, -2**31, 2**31),
                                    ("reconsume_times", reconsume_times, 0, 2**31),
                                    ("sys_flag", sys_flag, 0, 2**31),
                                    ("prepared_transaction_offset", prepared_transaction_offset,
                                     0, 2**63)):
                if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < hi:
                    raise InvalidInputError(f"{name} must be an int in [{lo}, {hi}), got {v!r}")
        if born_timestamp is not None and (not isinstance(born_timestamp, int)
                                           or isinstance(born_timestamp, bool)
                                           or not 0 <= born_timestamp < 2**63):
            raise InvalidInputError(
                f"born_timestamp must be ms since the epoch (int >= 0), got {born_timestamp!r}")
        if queue_id is not None and (not isinstance(queue_id, int) or isinstance(queue_id, bool)
                                     or not 0 <= queue_id < 2**31):
            raise InvalidInputError(f"queue_id must be a non-negative int, got {queue_id!r}")
        self.topic = topic
        self.body = body
        self.keys = (keys,) if isinstance(keys, str) else keys
        self.tags = tags
        self.properties = properties
        self.queue_id = queue_id
        self.shard_key = shard_key
        self.born_timestamp = born_timestamp
        self.flag = flag
        self.born_host = born_host
        self.reconsume_times = reconsume_times
        self.sys_flag = sys_flag
        self.prepared_transaction_offset = prepared_transaction_offset


class PutResult(tuple):
    """Outcome of one put (immutable). ``msg_id`` is 32 hex chars: store host + commit-log
    offset; it is formatted when first asked for."""

    __slots__ = ()

    def __new__(cls, status: PutStatus, commitlog_offset: int, size: int, store_timestamp: int,
                topic: str, queue_id: int, queue_offset: int, prefix: str) -> "PutResult":
        return tuple.__new__(cls, (status, commitlog_offset, size, store_timestamp, topic,
                                   queue_id, queue_offset, prefix))

    def __getnewargs__(self):
        return tuple(self)

    status = property(itemgetter(0))
    commitlog_offset = property(itemgetter(1))
    size = property(itemgetter(2))
    store_timestamp = property(itemgetter(3))
    topic = property(itemgetter(4))
    queue_id = property(itemgetter(5))
    queue_offset = property(itemgetter(6))

    @property
    def msg_id(self) -> str:
        return f"{self[7]}{self[1]:016X}"

    @property
    def ok(self) -> bool:
        return self[0] is PutStatus.OK

    def __repr__(self) -> str:
        return (f"PutResult({self.status.name}, msg_id={self.msg_id}, topic={self.topic!r}, "
                f"queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
                f"commitlog_offset={self.commitlog_offset}, size={self.size})")


class GetStatus(enum.Enum):
    """Outcome of ``store.get``; RocketMQ's statuses and next-offset rules."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"


@dataclass
class GetResult:
    """Messages of one queue from an offset; ``next_offset`` is where to continue."""

    status: GetStatus
    messages: list[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int

    @property
    def found(self) -> bool:
        return self.status is GetStatus.FOUND
