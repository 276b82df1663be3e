"""``BatchMessage``: a ``StoredMessage`` of a batch read whose fixed fields stay in the batch's
field table until one is read — the message object a ``MessageBatch`` hands out.

Why: a reader that reads every body (any consumer) paid, per message, for a 14-item tuple and
two int objects of its own (queue and commit-log offsets differ from message to message),
about two thirds of the cost of the body it wanted. A ``BatchMessage`` is a 4-item tuple —
topic, body, the batch's ``BatchRows`` and the message's column in it (an int from a shared
cache) — made in compiled code (``record_objects.make_lazy``): its own objects are the tuple
and the body's bytes. ``topic`` and ``body`` are read faster than a ``StoredMessage``'s
(member descriptors of the tuple's items: ``_item_member``); every other field is read from
the field table on access (the column turned into a list of ints once per batch, at its
first read), the properties and hosts sliced from the batch's buffer.

It is a ``StoredMessage`` in every other respect: ``isinstance``, the same attributes,
equal to and hashed like the ``StoredMessage`` of the same values, indexed, iterated and
``len``'d as that 14-item tuple, pickled as it (it unpickles as a plain ``StoredMessage``).
A message keeps its batch's buffer (the records' variable parts) alive while it lives.

Pure: no file I/O, no threads.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

from strata.format import record as rec
from strata.format import record_table as rk
from strata.format.record import StoredMessage, _tuplegetter


class BatchRows:
    """The buffer and field table (``record_table.F_*`` rows, section positions relative to
    the buffer) that the ``BatchMessage``s of one batch read their fields from; each row is
    turned into a list of ints at its first read (a list item is cheaper to read than a
    numpy one, and the ints of one row are made once for the whole batch)."""

    __slots__ = ("buf", "fields", "cols")

    def __init__(self, buf: bytes, fields: np.ndarray) -> None:
        self.buf = buf
        self.fields = fields
        self.cols: list[list[int] | None] = [None] * rk.FIELDS

    def col(self, row: int) -> list[int]:
        """Row ``row`` of the table as a list (made once)."""
        c = self.cols[row]
        if c is None:
            c = self.cols[row] = self.fields[row].tolist()
        return c

    def section(self, at_row: int, end_row: int, i: int) -> bytes:
        """The bytes of column ``i`` between the positions of rows ``at_row`` and
        ``end_row``."""
        return self.buf[self.col(at_row)[i]:self.col(end_row)[i]]


def _int_field(row: int, name: str) -> property:
    """A fixed field read from the batch's table (``row``) on access."""
    def get(self):
        try:
            return self._rows.cols[row][self._column]
        except TypeError:   # the row is not a list yet
            return self._rows.col(row)[self._column]
    return property(get, doc=f"``{name}`` (read from the batch's field table)")


def _section_field(at_row: int, end_row: int, name: str) -> property:
    def get(self):
        return self._rows.section(at_row, end_row, self._column)
    return property(get, doc=f"``{name}`` (sliced from the batch's buffer)")


_ROWS = {"queue_id": rk.F_QUEUE_ID, "queue_offset": rk.F_QUEUE_OFFSET,
         "commitlog_offset": rk.F_PHYS, "born_timestamp": rk.F_BORN_TS,
         "store_timestamp": rk.F_STORE_TS, "reconsume_times": rk.F_RECONSUME,
         "flag": rk.F_FLAG, "sys_flag": rk.F_SYS_FLAG,
         "prepared_transaction_offset": rk.F_TX_OFFSET, "size": rk.F_TOTAL}
assert set(_ROWS) | {"topic", "body", "properties_raw", "hosts_raw"} == \
    set(StoredMessage.FIELDS)


class _MemberDef(ctypes.Structure):
    """CPython's ``PyMemberDef``: what a slot's member descriptor reads (name, type code,
    offset in the object, flags, doc)."""

    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int),
                ("offset", ctypes.c_ssize_t), ("flags", ctypes.c_int),
                ("doc", ctypes.c_char_p)]


_T_OBJECT_EX, _READONLY = 16, 1   # structmember.h: an object slot (AttributeError if NULL)
_MEMBER_DEFS: list[_MemberDef] = []   # kept alive: a member descriptor points into its def


def _item_member(cls: type, index: int, name: str, doc: str | None):
    """A read-only member descriptor of ``cls`` for its tuple item ``index`` — what a slot
    of a class with ``__slots__`` gets, which a tuple subclass cannot declare.

    Why: ``m.body`` through ``_tuplegetter`` (namedtuple's field descriptor) is a generic
    attribute lookup each time (the interpreter's specializer does not know that
    descriptor), ~12 ns more a message than through a member descriptor, which CPython 3.11
    turns into a load at a fixed offset (``LOAD_ATTR_SLOT``); side by side, a scan reading
    every 100 B body spends ~10 % of its time there. The descriptor reads the item where
    ``PyTuple_GET_ITEM`` does (right after the tuple's fixed part). ``_tuplegetter`` on
    other interpreters."""
    if sys.implementation.name != "cpython" or tuple.__itemsize__ != 8:
        return _tuplegetter(index, doc)
    d = _MemberDef(name.encode(), _T_OBJECT_EX, tuple.__basicsize__ + 8 * index, _READONLY,
                   None if doc is None else doc.encode())
    new_member = ctypes.pythonapi.PyDescr_NewMember
    new_member.restype = ctypes.py_object
    new_member.argtypes = (ctypes.py_object, ctypes.c_void_p)
    _MEMBER_DEFS.append(d)
    return new_member(cls, ctypes.addressof(d))


class BatchMessage(StoredMessage):
    """A ``StoredMessage`` whose fixed fields are read from its batch's table on access (see
    the module's docstring). Made by ``MessageBatch`` only (``record_objects.make_lazy``, or
    ``BatchMessage.of`` when that cannot)."""

    __slots__ = ()
    WIDTH = 4   # (topic, body, rows, column): the tuple's own items

    def __init_subclass__(cls, **kwargs):
        # its objects are freed by a dealloc that knows their four items and nothing more
        # (``strata.format.message_dealloc``)
        raise TypeError("BatchMessage cannot be subclassed")

    def __new__(cls, values):   # a 14-value tuple makes a plain StoredMessage
        return StoredMessage(values)

    @classmethod
    def of(cls, topic: str, body: bytes, rows: BatchRows, column: int) -> "BatchMessage":
        return tuple.__new__(cls, (topic, body, rows, column))

    # topic, body, _rows and _column: member descriptors of the tuple's items (set below)

    queue_id = _int_field(rk.F_QUEUE_ID, "queue_id")
    queue_offset = _int_field(rk.F_QUEUE_OFFSET, "queue_offset")
    commitlog_offset = _int_field(rk.F_PHYS, "commitlog_offset")
    born_timestamp = _int_field(rk.F_BORN_TS, "born_timestamp")
    store_timestamp = _int_field(rk.F_STORE_TS, "store_timestamp")
    reconsume_times = _int_field(rk.F_RECONSUME, "reconsume_times")
    flag = _int_field(rk.F_FLAG, "flag")
    sys_flag = _int_field(rk.F_SYS_FLAG, "sys_flag")
    prepared_transaction_offset = _int_field(rk.F_TX_OFFSET, "prepared_transaction_offset")
    size = _int_field(rk.F_TOTAL, "size")
    properties_raw = _section_field(rk.F_PROPS_AT, rk.F_BODY_AT, "the encoded properties")
    hosts_raw = _section_field(rk.F_HOSTS_AT, rk.F_TOPIC_AT, "the encoded hosts")

    def values(self) -> tuple:
        """The 14 values of ``StoredMessage.FIELDS``, in order."""
        r, i = self._rows, self._column
        c = r.col
        return (self.topic, c(rk.F_QUEUE_ID)[i], c(rk.F_QUEUE_OFFSET)[i], c(rk.F_PHYS)[i],
                self.body, c(rk.F_BORN_TS)[i], c(rk.F_STORE_TS)[i], c(rk.F_RECONSUME)[i],
                c(rk.F_FLAG)[i], c(rk.F_SYS_FLAG)[i], c(rk.F_TX_OFFSET)[i], c(rk.F_TOTAL)[i],
                r.section(rk.F_PROPS_AT, rk.F_BODY_AT, i),
                r.section(rk.F_HOSTS_AT, rk.F_TOPIC_AT, i))

    def stored(self) -> StoredMessage:
        """The same message as a plain ``StoredMessage`` (which keeps no batch alive)."""
        return StoredMessage(self.values())

    # the 14-item tuple it stands for
    def __getitem__(self, i):
        return self.values()[i]

    def __len__(self) -> int:
        return len(StoredMessage.FIELDS)

    def __iter__(self):
        return iter(self.values())

    def __contains__(self, x) -> bool:
        return x in self.values()

    def count(self, x) -> int:
        return self.values().count(x)

    def index(self, x, *args) -> int:
        return self.values().index(x, *args)

    def __add__(self, other):
        return self.values() + other

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return _values_of(other) + self.values()

    def __mul__(self, n):
        return self.values() * n

    __rmul__ = __mul__

    def __hash__(self) -> int:
        return hash(self.values())

    def __reduce__(self):
        return (StoredMessage, (self.values(),))


for _i, (_name, _doc) in enumerate((
        ("topic", None), ("body", None), ("_rows", "the batch's BatchRows"),
        ("_column", "this message's column in the batch's table"))):
    setattr(BatchMessage, _name, _item_member(BatchMessage, _i, _name, _doc))
del _i, _name, _doc


def _values_of(x):
    return x.values() if type(x) is BatchMessage else x


def _compare(op: str):
    tuple_op = getattr(tuple, op)

    def cmp(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return tuple_op(self.values(), _values_of(other))
    cmp.__name__ = op
    return cmp


for _op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(BatchMessage, _op, _compare(_op))
del _op
assert rec.StoredMessage.__basicsize__ == BatchMessage.__basicsize__
