"""The embedded API's value types: what you put, what a put returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Mapping, Sequence

import numpy as np

from strata.errors import InvalidInputError
from strata.format.record import Host, StoredMessage  # noqa: F401  (re-exported)


class PutStatus(enum.Enum):
    OK = "OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"


_RARE_DEFAULTS = (None, None, 0, None, 0, 0, 0)  # queue_id .. prepared_transaction_offset
_RARE_NAMES = ("queue_id", "shard_key", "flag", "born_host", "reconsume_times", "sys_flag",
               "prepared_transaction_offset")
_INT_RANGES = {"flag": (-2**31, 2**31), "reconsume_times": (0, 2**31), "sys_flag": (0, 2**31),
               "prepared_transaction_offset": (0, 2**63)}


def _check_rare(name: str, v) -> None:
    """Refuse an out-of-range value for one of the rarely set fields."""
    if name == "queue_id":
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)
                              or not 0 <= v < 2**31):
            raise InvalidInputError(f"queue_id must be a non-negative int, got {v!r}")
    elif name in _INT_RANGES:
        lo, hi = _INT_RANGES[name]
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < hi:
            raise InvalidInputError(f"{name} must be an int in [{lo}, {hi}), got {v!r}")


def _rare_field(i: int, name: str) -> property:
    """A rarely set field, kept in the message's ``_rare`` tuple (None while all of them hold
    their defaults, so a batch of plain messages is recognised with one look per message)."""

    def get(self):
        rare = self._rare
        return _RARE_DEFAULTS[i] if rare is None else rare[i]

    def set_(self, value) -> None:
        _check_rare(name, value)
        rare = list(_RARE_DEFAULTS if self._rare is None else self._rare)
        rare[i] = value
        self._rare = None if tuple(rare) == _RARE_DEFAULTS else tuple(rare)

    return property(get, set_, doc=f"``{name}`` (default {_RARE_DEFAULTS[i]!r})")


class Message:
    """A message to append. ``keys`` are indexed for ``query``; ``tags`` filter ``get``.

    Mutable, compared and shown by value like a dataclass. The fields most messages leave at
    their defaults (``queue_id`` .. ``prepared_transaction_offset``) live together in one
    tuple, so the batch put path can tell a plain message at a glance."""

    __slots__ = ("topic", "body", "keys", "tags", "properties", "born_timestamp", "_rare")

    def __init__(self, topic: str, body: bytes, *, keys: Sequence[str] = (),
                 tags: str | None = None, properties: Mapping[str, str] | None = None,
                 queue_id: int | None = None, shard_key: str | None = None,
                 born_timestamp: int | None = None, flag: int = 0,
                 born_host: Host | None = None, reconsume_times: int = 0,
                 sys_flag: int = 0, prepared_transaction_offset: int = 0) -> None:
        if born_timestamp is not None and (not isinstance(born_timestamp, int)
                                           or isinstance(born_timestamp, bool)
                                           or not 0 <= born_timestamp < 2**63):
            raise InvalidInputError(
                f"born_timestamp must be ms since the epoch (int >= 0), got {born_timestamp!r}")
        self.topic = topic
        self.body = body
        self.keys = (keys,) if isinstance(keys, str) else keys
        self.tags = tags
        self.properties = properties
        self.born_timestamp = born_timestamp
        if (queue_id is None and shard_key is None and born_host is None and not flag
                and not reconsume_times and not sys_flag and not prepared_transaction_offset):
            self._rare = None
        else:
            rare = (queue_id, shard_key, flag, born_host, reconsume_times, sys_flag,
                    prepared_transaction_offset)
            for name, v in zip(_RARE_NAMES, rare):
                _check_rare(name, v)
            self._rare = None if rare == _RARE_DEFAULTS else rare

    queue_id = _rare_field(0, "queue_id")
    shard_key = _rare_field(1, "shard_key")
    flag = _rare_field(2, "flag")
    born_host = _rare_field(3, "born_host")
    reconsume_times = _rare_field(4, "reconsume_times")
    sys_flag = _rare_field(5, "sys_flag")
    prepared_transaction_offset = _rare_field(6, "prepared_transaction_offset")

    def _fields(self) -> tuple:
        return (self.topic, self.body, self.keys, self.tags, self.properties,
                self.born_timestamp, self._rare or _RARE_DEFAULTS)

    def __eq__(self, other) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        parts = [f"topic={self.topic!r}", f"body={self.body!r}", f"keys={self.keys!r}",
                 f"tags={self.tags!r}", f"properties={self.properties!r}"]
        parts += [f"{name}={getattr(self, name)!r}" for name in _RARE_NAMES[:2]]
        parts.append(f"born_timestamp={self.born_timestamp!r}")
        parts += [f"{name}={getattr(self, name)!r}" for name in _RARE_NAMES[2:]]
        return f"Message({', '.join(parts)})"


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
            offsets, qids, qoffs = (v.tolist() if isinstance(v, np.ndarray) else v
                                    for v in (offsets, qids, qoffs))
            items = self._items = list(map(tuple.__new__, repeat(PutResult, n), zip(
                repeat(self.status, n), offsets, sizes, repeat(ts, n),
                repeat(topics, n) if isinstance(topics, str) else topics, qids, qoffs,
                repeat(prefix, n))))
            self._columns = None
        return items

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else len(self._columns[1])

    def __getitem__(self, i):
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
