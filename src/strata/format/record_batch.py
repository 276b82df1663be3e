"""Many message records at once: finish them back to back (``seal_records``), and hand out
the records the compiled reader (``record_kernels``) checked as a ``MessageBatch`` whose
messages are made only when read. Pure functions: no file I/O, no threads.
"""

from __future__ import annotations

from itertools import repeat
from typing import Sequence

import numpy as np
from crc32c import crc32c

from strata.format import record as rec
from strata.format import record_table as rk
from strata.format.batch_message import BatchMessage, BatchRows

_NUMPY_CODE = {"I": "<u4", "i": "<i4", "q": "<i8", "H": "<u2"}
HEADER_DTYPE = np.dtype([(name, _NUMPY_CODE[code]) for name, code in rec.HEADER_FIELDS])
assert HEADER_DTYPE.itemsize == rec.HEADER_SIZE

HEADER_BYTES = np.dtype((np.void, rec.HEADER_SIZE))   # a fixed header as one opaque item
COMPILED_CRC_FROM = 32    # records per seal from which their CRCs are compiled


def header_windows(buf, limit: int) -> np.ndarray:
    """``buf[:limit]`` seen as a fixed header starting at every byte (a strided view: element
    ``i`` is the header of a record at position ``i``); indexing it with record positions
    gathers their headers in one step, ``.view(HEADER_DTYPE)`` names the fields. The items are
    opaque (HEADER_BYTES) because numpy moves those as plain byte copies, about ten times faster
    than field by field. The view pins ``buf`` while it lives."""
    return np.ndarray(shape=(max(0, limit - rec.HEADER_SIZE + 1),), dtype=HEADER_BYTES,
                      buffer=buf, strides=(1,))


def u32_windows(buf, limit: int) -> np.ndarray:
    """``buf[:limit]`` as a little-endian u32 starting at every byte."""
    return np.ndarray(shape=(max(0, limit - 3),), dtype="<u4", buffer=buf, strides=(1,))


def seal_records(buf, pos: int, end: int, headers: np.ndarray) -> None:
    """Finish the records lying back to back in ``buf[pos:end]`` (writable; each with its fixed
    header and trailer as zeros, or already filled in): ``headers`` (HEADER_DTYPE, CRC field
    ignored) scattered over them with one numpy assignment, the trailers with another, then
    each record's CRC32C stored. ``buf`` may be the records' own buffer, so a writer can
    finish them in memory and hand the file one ``pwrite`` (``CommitLog.append_headers``)."""
    if len(headers):
        _seal(buf, end, headers, *_spans(headers, pos, end))


def _spans(headers: np.ndarray, pos: int, end: int) -> tuple:
    """(starts, stops, totals) of the records ``headers`` describe from ``pos``; ValueError if
    they do not end exactly at ``end``."""
    n = len(headers)
    totals = headers["total"].astype(np.int64)
    starts = np.empty(n, np.int64)
    starts[0] = pos
    np.cumsum(totals[:-1], out=starts[1:])
    starts[1:] += pos
    stops = starts + totals
    if int(stops[-1]) != end:
        raise ValueError(f"record sizes add up to {int(stops[-1]) - pos} bytes, the blob "
                         f"holds {end - pos}")
    return starts, stops, totals


def _seal(buf, end: int, headers: np.ndarray, starts: np.ndarray, stops: np.ndarray,
          totals: np.ndarray) -> None:
    with memoryview(buf) as mv:
        header_windows(mv, end)[starts] = headers.view(HEADER_BYTES)
        u32_windows(mv, end)[stops - rec.TRAILER_SIZE] = totals
        if len(headers) >= COMPILED_CRC_FROM:
            # one compiled call for every record's CRC (a Python call each cost ~0.3 µs)
            crcs = np.empty(len(headers), np.uint32)
            rk.kernels().crc32c_ranges(np.frombuffer(mv, np.uint8), starts + rec.CRC_START,
                                       stops, crcs)
        else:
            # a comprehension slices inline: about twice as fast as map(slice, ...) here
            crcs = [crc32c(mv[a:b]) for a, b in zip((starts + rec.CRC_START).tolist(),
                                                     stops.tolist())]
        u32_windows(mv, end)[starts + rec.POS_CRC] = crcs


_NO_FIELDS = np.zeros((rk.FIELDS, 0), np.int64)


class MessageBatch(Sequence):
    """Messages read in one batch: a read-only sequence of ``StoredMessage`` (index, slice,
    iterate, ``len``, ``+``, compare with a list) over one buffer holding their records'
    variable parts and a table of their fixed fields (``record_kernels.F_*`` rows, section
    positions relative to the buffer).

    A message is made only when the sequence is indexed or iterated (all of them at the
    first iteration, as ``PutResults`` does for writes), so a batch whose messages are
    counted, or only partly read, costs no per-message objects; it is a ``BatchMessage``
    (``strata.format.batch_message``): its topic and body made, its other fields read from
    the batch's table when asked for. ``topic`` is every message's topic, or None to read each
    one's from the buffer (names cached in ``topics``).

    The buffer is a bytes object holding a copy of the records, or (a ``get`` of large records
    lying back to back: ``batch_reader.read_offsets``) a uint8 view of the segment's map over
    them, which the batch keeps alive until its messages are made; those are then made as
    ``made`` makes a scan's (each body copied once, from the map), and keep no reference to
    the map."""

    __slots__ = ("_buf", "_fields", "_topic", "_topics", "_items", "_rows")

    def __init__(self, buf: bytes | np.ndarray, fields: np.ndarray, topic: str | None,
                 topics: dict[bytes, str] | None = None) -> None:
        self._buf = buf
        self._fields = fields
        self._topic = topic
        self._topics = {} if topics is None else topics
        self._items: list[rec.StoredMessage] | None = None
        self._rows: BatchRows | None = None

    @classmethod
    def made(cls, buf, fields: np.ndarray, topic: str | None,
             topics: dict[bytes, str] | None = None) -> "MessageBatch":
        """A batch whose messages are made now from ``buf`` (a segment's map, say: no
        reference to it is kept), for a reader that reads every message anyway (``scan``):
        each body copied once, straight from ``buf`` into its bytes object, and the hosts,
        topic and properties of every record into one small buffer the messages keep, all in
        one compiled call (``record_objects.make_scanned``). ``buf`` may be a uint8 array
        (the walk's map) or any buffer. ``fields`` is not changed."""
        batch = cls(buf, fields, topic, topics)
        # (a uint8 array as it is: a scan's walk has the segment's map as one already)
        data = buf if type(buf) is np.ndarray else np.frombuffer(buf, np.uint8)
        batch._items = batch._scanned(data, fields)
        batch._buf, batch._fields = b"", _NO_FIELDS
        return batch

    def _scanned(self, data: np.ndarray, fields: np.ndarray) -> list[BatchMessage]:
        """The messages of every column of ``fields`` (positions in ``data``), each body
        copied once, straight from ``data`` into its bytes object, and the hosts, topic and
        properties of every record into one small buffer the messages keep (none keeps
        ``data`` alive), all in one compiled call (``record_objects.make_scanned``)."""
        n = fields.shape[1]
        heads = np.empty((rk.FIELDS, n), np.int64)   # the table the messages keep
        rows = BatchRows(b"", heads)
        out, holder = [None] * n, [b""]
        objects = rk.objects()
        made = objects.make_scanned(
            data, fields, heads, id(BatchMessage),
            0 if self._topic is None else id(self._topic), id(self._topics), id(rows),
            objects.column_ids(n), id(out), objects.DIRECT, id(holder)) if n else 0
        if made == -2:
            raise ValueError("a message's bytes lie outside its batch's buffer")
        rows.buf = holder[0]
        if made == n:
            return out
        # an object could not be made: the Python maker (which raises why)
        heads[:] = fields
        packed, address = objects.new_bytes(
            int((heads[rk.F_BODY_AT] - heads[rk.F_HOSTS_AT]).sum()))
        rk.kernels().pack_heads_to(data, heads, np.zeros(n, np.uint8), address)
        rows.buf = packed
        saved, self._buf = self._buf, data
        try:
            return self._make(0, n, rows)
        finally:
            self._buf = saved

    @classmethod
    def of(cls, messages: Sequence[rec.StoredMessage]) -> "MessageBatch":
        """A batch holding ``messages`` as they are (already made)."""
        batch = cls(b"", _NO_FIELDS, None)
        batch._items = list(messages)
        return batch

    def _topic_names(self, f: np.ndarray, a: list, b: list):
        """Every message's topic name, from its bytes (one name when they are all the same)."""
        names = self._topics
        shared = self._shared(f[rk.F_TOPIC_AT], f[rk.F_PROPS_AT], a, b)
        raw = [shared] if shared is not None else [bytes(self._buf[x:y]) for x, y in zip(a, b)]
        out = list(map(names.get, raw))
        if None in out:   # names this reader has not met yet (checked ASCII by the kernel)
            for j, tb in enumerate(raw):
                if out[j] is None:
                    out[j] = names[tb] = tb.decode("ascii")
        return repeat(out[0], len(a)) if shared is not None else out

    def _checked(self, first: int, count: int) -> None:
        f = self._fields
        if f[rk.F_HOSTS_AT, first:first + count].min() < 0 or \
                f[rk.F_BODY_END, first:first + count].max() > len(self._buf):  # (never: checked)
            raise ValueError("a message's bytes lie outside its batch's buffer")

    def _make(self, first: int, count: int, rows: BatchRows | None = None
              ) -> list[BatchMessage]:
        """The ``BatchMessage``s of the table's columns ``[first, first + count)``, which read
        their fields from ``rows`` (by default the batch's own buffer and table): made in
        compiled code (``record_objects.make_lazy``), or in Python if that could not make
        one (what raises the error then)."""
        if count == 0:
            return []
        buf, f = self._buf, self._fields
        if rows is None and type(buf) is np.ndarray:
            # a view of a segment's map (``batch_reader.read_offsets``): the bodies copied
            # once from it, and messages that do not keep the map alive
            return self._scanned(buf, f if first == 0 and count == f.shape[1] else
                                 np.ascontiguousarray(f[:, first:first + count]))
        if rows is None:
            rows = self._rows
            if rows is None:
                rows = self._rows = BatchRows(buf, f)
        out = [None] * count
        objects = rk.objects()
        if type(buf) is bytes:   # (its bytes' address without a numpy view: a get's batch)
            data, base = buf, id(buf) + objects.BYTES_DATA_AT
        else:
            data = np.frombuffer(buf, np.uint8)   # pins buf while the objects are made
            base = data.ctypes.data
        made = objects.make_lazy_within(
            len(buf), base, f, first, count, id(BatchMessage),
            0 if self._topic is None else id(self._topic), id(self._topics), id(rows),
            objects.column_ids(first + count), id(out), objects.DIRECT)
        if made == count:
            return out
        self._checked(first, count)   # (make_lazy_within said -2: this raises)
        data = np.frombuffer(buf, np.uint8)
        g = f[:, first:first + count]
        topics = repeat(self._topic, count) if self._topic is not None else \
            self._topic_names(g, g[rk.F_TOPIC_AT].tolist(), g[rk.F_PROPS_AT].tolist())
        return list(map(BatchMessage.of, topics, [data[a:b].tobytes() for a, b in zip(
            g[rk.F_BODY_AT].tolist(), g[rk.F_BODY_END].tolist())], repeat(rows, count),
            range(first, first + count)))

    def _shared(self, starts: np.ndarray, ends: np.ndarray, a: list, b: list) -> bytes | None:
        """``buf[a[0]:b[0]]`` if every ``buf[a[i]:b[i]]`` holds the same (short) bytes."""
        n = len(a)
        if n < 2:
            return None
        lens = ends - starts
        width = int(lens[0])
        if width > 128 or not (lens == width).all():
            return None
        if width == 0:
            return b""
        rows = np.frombuffer(self._buf, np.uint8)[starts[:, None] + np.arange(width)]
        return bytes(self._buf[a[0]:b[0]]) if (rows == rows[0]).all() else None

    def bodies(self) -> list[bytes]:
        """Every message's body, in order, without making the messages (when they are not
        made yet): one bytes object each, made in compiled code — for a reader that wants the
        bodies only, at about half the cost of a ``StoredMessage`` each."""
        if self._items is not None:
            return [m.body for m in self._items]
        f = self._fields
        count = f.shape[1]
        if count == 0:
            return []
        buf = self._buf
        if f[rk.F_BODY_AT].min() < 0 or f[rk.F_BODY_END].max() > len(buf):   # (never: checked)
            raise ValueError("a message's bytes lie outside its batch's buffer")
        out = [None] * count
        data = np.frombuffer(buf, np.uint8)   # pins buf while the bodies are made
        if rk.objects().make_bodies(data.ctypes.data, f, 0, count, id(out)) == count:
            return out
        return [buf[a:b] for a, b in zip(f[rk.F_BODY_AT].tolist(), f[rk.F_BODY_END].tolist())]

    def table(self) -> tuple[bytes, np.ndarray] | None:
        """(buffer, field table) of the messages not made yet — ``record_table.F_*`` rows,
        section positions relative to the buffer — for a reader that turns them into
        columns of its own (the Kafka listener's Fetch) without making a message each; None
        once they are made (or for a batch made of messages)."""
        if self._items is not None or self._fields.shape[1] == 0:
            return None
        return self._buf, self._fields

    def _list(self) -> list[rec.StoredMessage]:
        items = self._items
        if items is None:
            items = self._items = self._make(0, self._fields.shape[1])
        return items

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else self._fields.shape[1]

    def __getitem__(self, i):
        if self._items is None and type(i) is int:   # one message: made alone
            n = self._fields.shape[1]
            if -n <= i < n:
                return self._make(i % n, 1)[0]
        return self._list()[i]

    def __iter__(self):
        return iter(self._list())

    def __eq__(self, other) -> bool:
        if isinstance(other, MessageBatch):
            other = other._list()
        if isinstance(other, (list, tuple)):
            return self._list() == list(other)
        return NotImplemented

    __hash__ = None

    def __add__(self, other) -> list[rec.StoredMessage]:
        if isinstance(other, (list, tuple, MessageBatch)):
            return self._list() + list(other)
        return NotImplemented

    def __radd__(self, other) -> list[rec.StoredMessage]:
        if isinstance(other, (list, tuple)):
            return list(other) + self._list()
        return NotImplemented

    def __reduce__(self):
        return (list, (self._list(),))  # unpickles as a plain list of StoredMessage

    def __repr__(self) -> str:
        return f"MessageBatch({self._list()!r})"


def join_parts(parts: list[tuple[bytes, np.ndarray]], topic: str | None,
               topics: dict[bytes, str] | None = None) -> MessageBatch:
    """One MessageBatch of several parts, each a buffer and the field table of its records
    (positions relative to that buffer): the buffers joined, the positions shifted."""
    if len(parts) == 1:
        return MessageBatch(parts[0][0], parts[0][1], topic, topics)
    shift = 0
    fs = [np.zeros((rk.FIELDS, 0), np.int64)]
    for buf, f in parts:
        f = f.copy()
        f[rk.F_HOSTS_AT:rk.F_BODY_END + 1] += shift
        shift += len(buf)
        fs.append(f)
    return MessageBatch(b"".join(buf for buf, _f in parts), np.concatenate(fs, axis=1), topic,
                        topics)


def join_batches(batches: list[MessageBatch], topic: str | None,
                 topics: dict[bytes, str] | None = None) -> MessageBatch:
    """One MessageBatch of the messages of ``batches`` in order (still lazy if they were)."""
    if any(b._items is not None for b in batches):
        return MessageBatch.of([m for b in batches for m in b])
    return join_parts([(b._buf, b._fields) for b in batches], topic, topics)
