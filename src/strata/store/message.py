"""The embedded API's value types: what you put, what a put returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from strata.errors import CorruptRecordError, InvalidInputError
from strata.format.record import Host, StoredMessage, damaged_record_error  # noqa: F401
from strata.format.record_batch import MessageBatch


class PutStatus(enum.Enum):
    OK = "OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"


# Every field but topic and body, in the order of Message._ext; a message that leaves them all
# at these defaults has _ext None.
EXT_NAMES = ("keys", "tags", "properties", "queue_id", "shard_key", "born_timestamp", "flag",
             "born_host", "reconsume_times", "sys_flag", "prepared_transaction_offset")
EXT_DEFAULTS = ((), None, None, None, None, None, 0, None, 0, 0, 0)
EXT_INDEX = {name: i for i, name in enumerate(EXT_NAMES)}
_INT_RANGES = {"flag": (-2**31, 2**31), "reconsume_times": (0, 2**31), "sys_flag": (0, 2**31),
               "prepared_transaction_offset": (0, 2**63)}  # in Message.__init__'s order


def _check_field(name: str, v) -> None:
    """Refuse an out-of-range value for a field that has a range."""
    if name == "born_timestamp":
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)
                              or not 0 <= v < 2**63):
            raise InvalidInputError(
                f"born_timestamp must be ms since the epoch (int >= 0), got {v!r}")
    elif name == "queue_id":
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)
                              or not 0 <= v < 2**31):
            raise InvalidInputError(f"queue_id must be a non-negative int, got {v!r}")
    elif name in _INT_RANGES:
        lo, hi = _INT_RANGES[name]
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < hi:
            raise InvalidInputError(f"{name} must be an int in [{lo}, {hi}), got {v!r}")


def _ext_field(name: str) -> property:
    """A field kept in the message's ``_ext`` tuple (None while every such field holds its
    default, so a batch of plain messages is recognised with one look per message)."""
    i = EXT_INDEX[name]
    default = EXT_DEFAULTS[i]

    def get(self):
        ext = self._ext
        return default if ext is None else ext[i]

    def set_(self, value) -> None:
        _check_field(name, value)
        ext = list(EXT_DEFAULTS if self._ext is None else self._ext)
        ext[i] = value
        self._ext = _ext_or_none(tuple(ext))

    return property(get, set_, doc=f"``{name}`` (default {default!r})")


def _ext_or_none(ext: tuple) -> tuple | None:
    """None for the defaults; keys [] or properties {} are kept as given."""
    keys = ext[0]
    return None if type(keys) is tuple and not keys and ext[1:] == EXT_DEFAULTS[1:] else ext


class Message:
    """A message to append. ``keys`` are indexed for ``query``; ``tags`` filter ``get``.

    Mutable, compared and shown by value like a dataclass. Every field but ``topic`` and
    ``body`` lives in one tuple, which is None while they all hold their defaults: the batch
    put path tells a plain message by one attribute."""

    __slots__ = ("topic", "body", "_ext")

    def __init__(self, topic: str, body: bytes, *, keys: Sequence[str] = (),
                 tags: str | None = None, properties: Mapping[str, str] | None = None,
                 queue_id: int | None = None, shard_key: str | None = None,
                 born_timestamp: int | None = None, flag: int = 0,
                 born_host: Host | None = None, reconsume_times: int = 0,
                 sys_flag: int = 0, prepared_transaction_offset: int = 0) -> None:
        self.topic = topic
        self.body = body
        if (type(keys) is tuple and not keys and tags is None and properties is None
                and born_timestamp is None and queue_id is None and shard_key is None
                and born_host is None and not flag and not reconsume_times and not sys_flag
                and not prepared_transaction_offset):
            self._ext = None
            return
        if isinstance(keys, str):
            keys = (keys,)
        if born_timestamp is not None:
            _check_field("born_timestamp", born_timestamp)
        if queue_id is not None:
            _check_field("queue_id", queue_id)
        ints = (flag, reconsume_times, sys_flag, prepared_transaction_offset)
        if (flag or reconsume_times or sys_flag or prepared_transaction_offset
                or type(flag) is not int or type(reconsume_times) is not int
                or type(sys_flag) is not int or type(prepared_transaction_offset) is not int):
            for name, v in zip(_INT_RANGES, ints):
                _check_field(name, v)
        # some field differs from its default (the test above), so the tuple is needed
        self._ext = (keys, tags, properties, queue_id, shard_key, born_timestamp, flag,
                     born_host, reconsume_times, sys_flag, prepared_transaction_offset)

    keys = _ext_field("keys")
    tags = _ext_field("tags")
    properties = _ext_field("properties")
    queue_id = _ext_field("queue_id")
    shard_key = _ext_field("shard_key")
    born_timestamp = _ext_field("born_timestamp")
    flag = _ext_field("flag")
    born_host = _ext_field("born_host")
    reconsume_times = _ext_field("reconsume_times")
    sys_flag = _ext_field("sys_flag")
    prepared_transaction_offset = _ext_field("prepared_transaction_offset")

    def _fields(self) -> tuple:
        return (self.topic, self.body) + (self._ext or EXT_DEFAULTS)

    def __eq__(self, other) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        ext = self._ext or EXT_DEFAULTS
        parts = [f"topic={self.topic!r}", f"body={self.body!r}"]
        parts += [f"{name}={v!r}" for name, v in zip(EXT_NAMES, ext)]
        return f"Message({', '.join(parts)})"


class ColumnBatch(NamedTuple):
    """One ``put_columns`` call as a value (its arguments), so that several of them, and
    lists of messages, can be stored by one ``MessageStore.put_many`` under one group
    commit."""

    topic: str
    queue_id: int | None
    bodies: object
    keys: object = None
    tags: object = None
    properties: object = None
    born_timestamps: object = None


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


class PutResults(Sequence):
    """The results of one ``put_batch``: a read-only sequence of ``PutResult``, one per message
    in order (index, slice, iterate, ``len``, ``+``, compare with a list).

    The ``PutResult`` objects are made on first access, so a batch whose results are never
    read costs no per-message objects. ``status`` and ``ok`` hold for the whole batch (its
    messages were appended, and flushed or not, together)."""

    __slots__ = ("status", "_columns", "_items")

    def __init__(self, status: PutStatus, commitlog_offsets, sizes, store_timestamp: int,
                 topics, queue_ids, queue_offsets, msg_id_prefix: str) -> None:
        self.status = status
        # per message: sequences (list or numpy) of equal length; topics may be one str
        self._columns = (commitlog_offsets, sizes, store_timestamp, topics, queue_ids,
                         queue_offsets, msg_id_prefix)
        self._items: list[PutResult] | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.OK

    def _list(self) -> list[PutResult]:
        items = self._items
        if items is None:
            offsets, sizes, ts, topics, qids, qoffs, prefix = self._columns
            n = len(sizes)
            offsets, sizes, qids, qoffs = (v.tolist() if isinstance(v, np.ndarray) else v
                                           for v in (offsets, sizes, qids, qoffs))
            items = self._items = list(map(tuple.__new__, repeat(PutResult, n), zip(
                repeat(self.status, n), offsets, sizes, repeat(ts, n),
                repeat(topics, n) if isinstance(topics, str) else topics, qids, qoffs,
                repeat(prefix, n))))
        return items

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else len(self._columns[1])

    def __getitem__(self, i):
        if self._items is None and type(i) is int:   # one result: made alone (put() does this)
            offsets, sizes, ts, topics, qids, qoffs, prefix = self._columns
            n = len(sizes)
            if -n <= i < n:
                return tuple.__new__(PutResult, (
                    self.status, int(offsets[i]), int(sizes[i]), ts,
                    topics if isinstance(topics, str) else topics[i], int(qids[i]),
                    int(qoffs[i]), prefix))
        return self._list()[i]

    def __iter__(self):
        return iter(self._list())

    def __eq__(self, other) -> bool:
        if isinstance(other, PutResults):
            other = other._list()
        if isinstance(other, (list, tuple)):
            return self._list() == list(other)
        return NotImplemented

    __hash__ = None

    def __add__(self, other) -> list[PutResult]:
        """``results + more`` (a list, a tuple or another PutResults) is a plain list."""
        if isinstance(other, (list, tuple, PutResults)):
            return self._list() + list(other)
        return NotImplemented

    def __radd__(self, other) -> list[PutResult]:
        if isinstance(other, (list, tuple)):
            return list(other) + self._list()
        return NotImplemented

    def __reduce__(self):
        return (list, (self._list(),))  # unpickles as a plain list of PutResult

    def __repr__(self) -> str:
        return f"PutResults({self._list()!r})"


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


class CorruptRecord(NamedTuple):
    """A damaged record that ``get`` passed over (it fails its CRC or cannot be decoded): it is
    never served, and reported with what failed."""

    queue_offset: int
    commitlog_offset: int
    reason: str

    def error(self) -> CorruptRecordError:
        """The damage as the error that ``read_at`` raises for it (names the offset; a record
        read from the tier, ``commitlog_offset`` -1, is named by its tier object in ``reason``)."""
        if self.commitlog_offset < 0:
            return CorruptRecordError(self.reason)
        return damaged_record_error(self.commitlog_offset, self.reason)


@dataclass
class GetResult:
    """Messages of one queue from an offset; ``next_offset`` is where to continue.
    ``corrupt`` lists the damaged records passed over on the way (in queue order), which
    ``messages`` leaves out. ``messages`` is a sequence (a ``MessageBatch`` or a list): a
    batch read makes each ``StoredMessage`` from its one buffer only when it is read."""

    status: GetStatus
    messages: Sequence[StoredMessage]
    next_offset: int
    min_offset: int
    max_offset: int
    corrupt: tuple[CorruptRecord, ...] = ()

    @property
    def found(self) -> bool:
        return self.status is GetStatus.FOUND

    def bodies(self) -> list[bytes]:
        """The messages' bodies, in order — ``[m.body for m in messages]`` without making a
        ``StoredMessage`` each when the messages are a batch not read yet (bytes objects
        made in compiled code: ``MessageBatch.bodies``)."""
        m = self.messages
        return m.bodies() if isinstance(m, MessageBatch) else [x.body for x in m]
