"""A queue's messages as Arrow columns (``MessageStore.get_columns``): what a consumer that
wants arrays (the Kafka listener's Fetch, Spark, analytics) gets without a Python object per
message.

A views read (``units_batch``, the usual one) allocates ONE buffer a call and, for records
that lie back to back without properties (a queue written alone), fills it in ONE compiled
call (``arrow_c.read_batch``): the pass over the records where they lie in the segment's map
(``view_kernels.in_place``) writes the views table and the views into it, then the batch's
``ArrowArray`` structs; pyarrow imports them through the Arrow C data interface (~3× cheaper
a call than an ``Array.from_buffers`` per column). The buffer and what the batch points into
(the segment's map, or the copy) are held here (``_hold``) until Arrow releases the batch:
its release is compiled code (``arrow_c.batch_release``) that sets a word in the buffer, seen
by the next call. ``binary`` columns come from
``strata.log.batch_reader.read_columns`` (each record checked in one compiled pass, its body
and properties copied once into one buffer per column), which Arrow wraps without copying
again. pyarrow is imported on first use (the ``spark`` extra installs it) and kept.
"""

from __future__ import annotations

import ctypes
import struct
from collections import deque
from dataclasses import dataclass

import numpy as np

from strata.errors import StrataError
from strata.format import record_table as rk
from strata.format.consume_queue import UNIT_SIZE
from strata.log import batch_reader as br
from strata.store.message import GetStatus

# The columns of ``ColumnsResult.batch``, in order.
COLUMNS = ("queue_offset", "commitlog_offset", "store_timestamp", "born_timestamp", "body",
           "keys", "properties")


_PA = None


def pyarrow():
    """The pyarrow module, imported on first use (a StrataError saying how to install it if
    it is not there) and kept (an import statement a call cost ~0.2 µs)."""
    global _PA
    if _PA is not None:
        return _PA
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - pyarrow comes with the spark extra
        raise StrataError("get_columns needs pyarrow: pip install 'strata[spark]'") from None
    _PA = pa
    return pa


@dataclass(frozen=True, slots=True, init=False)
class ColumnsResult:
    """Messages of one queue from an offset as one Arrow record batch (``batch``; schema:
    ``schema()``), with ``get``'s status and offsets: ``next_offset`` is where to continue.
    ``batch`` has no rows unless ``status`` is FOUND. Frozen; made a call, so its fields are
    set through their slots (a frozen dataclass's own ``__init__`` cost twice as much)."""

    status: GetStatus
    batch: object          # pyarrow.RecordBatch
    next_offset: int
    min_offset: int
    max_offset: int

    def __init__(self, status: GetStatus, batch: object, next_offset: int, min_offset: int,
                 max_offset: int) -> None:
        _SET_STATUS(self, status)
        _SET_BATCH(self, batch)
        _SET_NEXT(self, next_offset)
        _SET_MIN(self, min_offset)
        _SET_MAX(self, max_offset)

    @property
    def found(self) -> bool:
        return self.status is GetStatus.FOUND

    def __len__(self) -> int:
        return self.batch.num_rows


_SET_STATUS, _SET_BATCH, _SET_NEXT, _SET_MIN, _SET_MAX = (
    ColumnsResult.__dict__[name].__set__
    for name in ("status", "batch", "next_offset", "min_offset", "max_offset"))

_SCHEMAS: dict[bool, object] = {}


def schema(views: bool = True):
    """The record batch's schema: ``queue_offset``, ``commitlog_offset``, ``store_timestamp``
    and ``born_timestamp`` (int64, ms), ``body`` (``binary_view``, or ``binary`` with
    ``views=False``), ``keys`` (list of string: the message's keys in order, without its
    unique key), ``properties`` (``binary_view`` / ``binary``: the encoded properties section
    as stored, keys, tags and user properties; docs/format.md). ``binary_view`` arrays point
    into one copy of the records (no copy of each body); some Arrow compute functions and
    consumers take ``binary`` only, hence the choice."""
    got = _SCHEMAS.get(views)
    if got is not None:
        return got
    pa = pyarrow()
    blob = pa.binary_view() if views else pa.binary()
    got = _SCHEMAS[views] = pa.schema([
        ("queue_offset", pa.int64()), ("commitlog_offset", pa.int64()),
        ("store_timestamp", pa.int64()), ("born_timestamp", pa.int64()), ("body", blob),
        ("keys", pa.list_(pa.string())), ("properties", blob)])
    return got


def empty_batch(views: bool = True):
    pa = pyarrow()
    return pa.RecordBatch.from_pylist([], schema=schema(views))


def _binary(pa, data: np.ndarray, offsets: np.ndarray, kind):
    """An Arrow binary/string array over ``data`` with ``offsets`` (no copy of ``data``)."""
    large = int(offsets[-1]) >= 2 ** 31
    typ = {"binary": pa.large_binary() if large else pa.binary(),
           "string": pa.large_string() if large else pa.string()}[kind]
    off = offsets if large else offsets.astype(np.int32)
    return pa.Array.from_buffers(typ, len(offsets) - 1, [None, pa.py_buffer(off),
                                                          pa.py_buffer(data)])


_NO_KEYS: dict[int, object] = {}


def key_parts(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The keys of every message as list<string> buffers — (the lists' int32 offsets, the
    strings' int64 offsets, their bytes) —, found in the properties sections
    ``data[starts[i]:ends[i]]`` by the compiled properties reader; None if one does not
    parse (``arrow_c.key_lists``: one compiled call)."""
    from strata.format.arrow_c import key_lists
    ok, list_off, val_off, values = key_lists(data, starts, ends)
    return (list_off, val_off, values) if ok else None


def _keys(pa, data: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int,
          any_props: bool):
    """The keys of every message (list<string>), found in the properties sections
    ``data[starts[i]:ends[i]]`` by the compiled properties reader; None if one does not parse.
    ``any_props`` False: no message has properties, so none has keys."""
    if not any_props:   # no properties at all: no keys (arrays are immutable: shared)
        empty = _NO_KEYS.get(n)
        if empty is None:
            empty = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)),
                                             pa.array([], pa.string()))
            if len(_NO_KEYS) < 64:
                _NO_KEYS[n] = empty
        return empty
    parts = key_parts(data, starts, ends, n)
    if parts is None:
        return None
    list_off, val_off, values = parts
    return pa.ListArray.from_arrays(pa.array(list_off), _binary(pa, values, val_off, "string"))


def arrow_batch(read, views: bool = True) -> object | None:
    """The record batch of a ``read_columns`` result (None if some properties section does
    not parse: the caller then builds it from messages); with ``views`` cast to the views
    schema (a read across segments: rare)."""
    pa = pyarrow()
    f = read.fields
    n = f.shape[1]
    off = read.prop_offsets
    keys = _keys(pa, read.properties, off[:-1], off[1:], n, bool(off[-1] != off[0]))
    if keys is None:
        return None
    cols = [pa.array(np.ascontiguousarray(f[r])) for r in
            (rk.F_QUEUE_OFFSET, rk.F_PHYS, rk.F_STORE_TS, rk.F_BORN_TS)]
    cols += [_binary(pa, read.bodies, read.body_offsets, "binary"), keys,
             _binary(pa, read.properties, read.prop_offsets, "binary")]
    batch = pa.RecordBatch.from_arrays(cols, schema=schema(False))
    return batch.cast(schema(True)) if views else batch


# Batches imported through the C data interface: each one's block (its structs, with the FLAG
# word that ``arrow_c.batch_release`` sets once Arrow let the batch go) and what its buffers
# point into, oldest first, until the flag is seen (``_hold``). Never freed itself (``_c_parts``
# keeps a reference that is never dropped): at the interpreter's exit, batches still alive in
# other objects may be released after this module's globals are cleared, and their flags
# must still be memory that nothing else took.
_HELD: deque = deque()
_SWEEP = [64]      # sweep every entry once there are this many (then twice what stays)


_SPARE: list = []   # released one-call buffers (``_buffer``), at most ``_SPARES``
_SPARES = 2


def _let_go() -> None:
    """Let go of the batches Arrow has released, oldest first up to the first it has not,
    and of every released one once the held grow past ``_SWEEP`` (a batch kept long does not
    keep the later ones); a released one-call buffer is kept for the next call
    (``_buffer``). Thread-safe without a lock: an entry is taken off the deque (one atomic
    step) by one thread, and put back unless it is released."""
    held = _HELD
    flag = _FLAG
    while (first := _first(held)) is not None:
        if not first[0][flag]:
            held.appendleft(first)
            break
        if first[2] and len(_SPARE) < _SPARES:
            _SPARE.append(first[0])
    if len(held) >= _SWEEP[0]:
        _SWEEP[0] = max(64, 2 * release_held())


def _buffer(words: int) -> np.ndarray:
    """A one-call buffer of at least ``words`` int64: a released one (``_let_go``: nothing
    points into it any more) if one is that large, else a new one. Reusing it spares the
    allocation and its page faults (a 4,096-message call's ~450 KB buffer is above the C
    library's mmap threshold at first, and its pages were given back and faulted in again)
    and finds it in the CPU's caches."""
    spare = _SPARE
    while spare:
        try:
            got = spare.pop()
        except IndexError:
            break
        if len(got) >= words:
            return got
    return np.empty(words, np.int64)


def _hold(block: np.ndarray, *what, reuse: bool = False) -> None:
    """Keep ``block`` and ``what`` (the arrays the batch's buffers point into) until Arrow
    releases the batch (its FLAG word set; ``_let_go``); ``reuse``: ``block`` is a one-call
    buffer nothing else refers to, to be reused then."""
    _HELD.append((block, what, reuse))


def _first(held: deque) -> tuple | None:
    """``held``'s first entry, taken off it; None if it is empty (another thread may have
    taken the last one between a check and the take)."""
    try:
        return held.popleft()
    except IndexError:
        return None


def release_held() -> int:
    """Let go of every batch Arrow has released; returns how many are still held (tests,
    the store's close, and ``_let_go`` now and then)."""
    held = _HELD
    flag = _FLAG
    for _ in range(len(held)):
        first = _first(held)
        if first is None:
            break
        if not first[0][flag]:
            held.append(first)
    return len(held)


def held_arrays() -> list:
    """What the batches Arrow has not released yet point into, a tuple a batch (tests)."""
    release_held()
    return [entry[1] for entry in list(_HELD)]


_C: tuple = ()
_FLAG = 0


def _c_parts() -> tuple:
    """(the kernel module, the batch's release address, the columns' release address,
    ``RecordBatch._import_from_c``, the views schema), made once; the held deque made
    immortal (``_HELD``)."""
    global _C, _FLAG
    from strata.format import arrow_c
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_HELD))   # never freed (above)
    _FLAG = arrow_c.FLAG
    _C = (arrow_c, arrow_c.batch_release.address, arrow_c.child_release.address,
          pyarrow().RecordBatch._import_from_c, schema(True))
    return _C


def _c_batch(pa, read):
    """The record batch of a views read: its ``ArrowArray`` structs written by
    ``arrow_c.fill_views_batch`` in one compiled call and imported (~3× cheaper than an
    ``Array.from_buffers`` per column and ``RecordBatch.from_arrays``); the keys' buffers
    from ``key_parts`` (none without properties). None if some properties section does not
    parse."""
    ac, release, child, import_batch, views_schema = _C or _c_parts()
    f = read.fields
    n = f.shape[1]
    if f.strides != (8 * n, 8):        # the int columns are read as rows n apart
        f = np.ascontiguousarray(f)
    if read.prop_bytes == 0:
        zeros = _ZEROS[0]
        if len(zeros) <= n:
            zeros = _ZEROS[0] = np.zeros(n + 1, np.int32)
        keys = (zeros, zeros, zeros, 0)
    else:
        parts = key_parts(read.span, f[rk.V_PROPS_AT], f[rk.V_BODY_AT], n)
        if parts is None:
            return None
        list_off, val_off, values = parts
        keys = (list_off, val_off.astype(np.int32), values, len(val_off) - 1)
    _let_go()
    block = np.empty(ac.WORDS, np.int64)
    addr = ac.fill_views_batch(block, f, read.body_views, read.prop_views, read.span, *keys,
                               release, child)
    _hold(block, read, keys, f)
    return import_batch(addr, views_schema)


_ZEROS = [np.zeros(1025, np.int32)]     # the empty key lists' offsets (never written)
_PHYS = struct.Struct("<q")     # a consume-queue unit's first field: the commit-log offset


def units_batch(log, useg, at: int, n: int, limit: int, *, verify_crc: bool, topic: str,
                queue_id: int, first_offset: int) -> object | bool | None:
    """The record batch (views schema) of the ``n`` > 0 consume-queue units at byte ``at`` of
    file ``useg`` (``ConsumeQueue.unit_span``: read in the file's map, not copied), messages
    ``first_offset``, ... of the queue, when their records lie in one segment of commit log
    ``log``. Records back to back without properties (one queue written alone) take ONE
    compiled call, ``arrow_c.read_batch``: the views table, views and C structs into ONE
    buffer, over the segment's map; then the import. With properties the keys are found
    (``_c_batch``); records not back to back are copied once (``batch_reader.read_views``).
    As ``read_views``: True if the records are not in one segment or add up to more than
    views reach (``read_columns`` reads them), False if one is not as it must be; None if a
    file is gone (retention, just now)."""
    ac, release, child, import_batch, views_schema = _C or _c_parts()
    units = useg.array   # the file's map as uint8 (None once closed)
    if units is None:
        return None
    seg = log.segments.find(_PHYS.unpack_from(units, at)[0])
    if seg is None:
        return True
    mapped = br.map_for_views(seg, limit)
    if mapped is None:
        return False
    data, delta, end = mapped
    _let_go()
    out = _buffer(ac.call_words(n))
    got = ac.read_batch(out, data, units, at, n, delta, end, verify_crc, br.topic_array(topic),
                        queue_id, first_offset, release, child)
    if got > 0:
        _hold(out, data, reuse=True)
        return import_batch(got, views_schema)
    if got == 0:
        return False
    if got == -3:   # back to back, with properties: the keys first
        start = int(out[ac.START])
        table, views, _v0, _z0 = ac.views_parts(out, n)
        return _c_batch(pyarrow(), br.ViewsRead(table, data[start:start + int(out[ac.OWN])],
                                                 views[0], views[1], int(out[ac.PROPS])))
    if _PHYS.unpack_from(units, at + UNIT_SIZE * (n - 1))[0] >= seg.end_offset:
        return True
    table, views, _v0, _z0 = ac.views_parts(out, n)
    read = br.read_views(seg, units[at:at + UNIT_SIZE * n], limit, verify_crc=verify_crc,
                         topic=topic, queue_id=queue_id, first_offset=first_offset,
                         in_place=False, table=table, views=views)
    if read is True or read is False:
        return read
    if read.prop_bytes:   # the keys first
        return _c_batch(pyarrow(), read)
    span = read.span
    address = ac.fill_read(out, n, span, 0, len(span), release, child)
    _hold(out, span, reuse=True)
    return import_batch(address, views_schema)


def views_batch(read) -> object | None:
    """The record batch (views schema) of a ``read_views`` result: every array wraps the
    read's own buffers — the views table's rows, the views, the one copy of the records —
    without copying them (None if some properties section does not parse). Built through
    the Arrow C data interface (``_c_batch``)."""
    return _c_batch(pyarrow(), read)


def batch_of_messages(messages, views: bool = True) -> object:
    """The record batch of messages made one by one (``get``'s slow path: damage, tier)."""
    pa = pyarrow()
    rows = [{"queue_offset": m.queue_offset, "commitlog_offset": m.commitlog_offset,
             "store_timestamp": m.store_timestamp, "born_timestamp": m.born_timestamp,
             "body": m.body, "keys": list(m.keys), "properties": m.properties_raw}
            for m in messages]
    return pa.RecordBatch.from_pylist(rows, schema=schema(views))
