"""Commit-log records -> Arrow columns, in bulk (no per-row Python on the core path).

Given a batch's commit-log offsets (sorted) and the commit-log segments, a compiled pass
(kernels.scan_headers) checks every record with the record reader's own check (the one get and
scan run: record_kernels; CRC32C with ``verify_crc``) and reads its header fields into numpy
arrays, and the variable-length columns (value, key, topic) are copied straight from the
memory maps into Arrow buffers (kernels.gather); keys, tags and user properties (headers) come
out of the properties sections the same way (kernels.scan_properties, property_spans), and
message ids are formatted for the whole batch at once: no per-row Python for any column.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from strata.errors import CorruptRecordError
from strata.format import record as rec
from strata.log.record_area import area_runs
from strata.spark import kernels as k


def _validity(mask: np.ndarray) -> pa.Buffer | None:
    if mask.all():
        return None
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


class _Column:
    """Builds one binary/string column from byte ranges of one or more source buffers."""

    def __init__(self, lens: np.ndarray, mask: np.ndarray | None = None) -> None:
        self.lens = lens if mask is None else np.where(mask, lens, 0)
        self.mask = mask
        total = int(self.lens.sum())
        if total >= 2**31:
            raise ValueError("an Arrow batch would exceed 2 GiB of one column; "
                             "lower option 'maxRecordsPerBatch'")
        self.offsets = np.empty(len(lens) + 1, np.int32)
        self.blob = np.empty(total, np.uint8)
        self.at = 0

    def copy(self, src: np.ndarray, starts: np.ndarray, lo: int, hi: int) -> None:
        """Rows lo..hi come from ``src`` at ``starts`` (one entry per row of the range)."""
        self.at = k.gather(src, starts, self.lens[lo:hi], self.blob, self.offsets, lo, self.at)

    def array(self, typ=pa.binary()) -> pa.Array:
        self.offsets[-1] = self.at
        validity = _validity(self.mask) if self.mask is not None else None
        return pa.Array.from_buffers(typ, len(self.lens), [validity, pa.py_buffer(self.offsets),
                                                            pa.py_buffer(self.blob)])


class Records:
    """The records at a batch's commit-log offsets, ascending (log order, as
    log_order.log_ordered_units gives them): every header field as a numpy array
    (``fields[kernels.BODY_LEN]`` ...), and the runs of rows that lie in each segment (or in
    one buffer: ``from_buffer``). A record that fails its check (CRC32C too with
    ``verify_crc``) is a CorruptRecordError, never a row."""

    def __init__(self, segments, phys: np.ndarray, *, verify_crc: bool) -> None:
        self.verify_crc = verify_crc
        self.phys = phys
        self.n = len(phys)
        self.fields = np.empty((k.FIELDS, self.n), np.int64)
        self._props_index: tuple[np.ndarray, ...] | None = None   # _properties_index()
        # (first row, end row, bytes as uint8, byte positions of those rows' records)
        self.spans: list[tuple[int, int, np.ndarray, np.ndarray]] = []
        for lo, hi, seg, area, pos in area_runs(segments, phys):
            if seg is None:
                raise CorruptRecordError(f"commit-log offset {int(phys[lo])} is below the "
                                         "oldest segment (deleted by retention?)")
            self._add_span(lo, hi, area, pos)

    @classmethod
    def from_buffer(cls, data: np.ndarray, positions: np.ndarray, phys: np.ndarray, *,
                    verify_crc: bool) -> "Records":
        """The records at ``positions`` of one buffer (``data``, uint8) that carry commit-log
        offsets ``phys``: e.g. a tier chunk's .log object, whose records keep the offsets of
        the log that wrote them (docs/format.md section 14)."""
        self = cls.__new__(cls)
        self.verify_crc = verify_crc
        self.phys = phys
        self.n = len(phys)
        self.fields = np.empty((k.FIELDS, self.n), np.int64)
        self._props_index = None
        self.spans = []
        if self.n:
            self._add_span(0, self.n, data, positions)
        return self

    def _add_span(self, lo: int, hi: int, data: np.ndarray, pos: np.ndarray) -> None:
        self.spans.append((lo, hi, data, pos))
        bad, why = k.scan_headers(data, pos, self.phys[lo:hi], self.fields, lo,
                                  self.verify_crc)
        if bad >= 0:
            at = int(self.phys[lo + bad])
            if why == k.CRC_MISMATCH:
                raise CorruptRecordError(f"the message record at commit-log offset {at} fails "
                                         "its CRC32C (damaged bytes) although a consume queue "
                                         "points there")
            raise CorruptRecordError(f"no intact message record at commit-log offset {at} "
                                     "although a consume queue points there")

    def _bytes(self, start_row: int, len_row: int, mask: np.ndarray | None = None) -> pa.Array:
        col = _Column(self.fields[len_row], mask)
        for lo, hi, data, pos in self.spans:
            col.copy(data, self.fields[start_row, lo:hi], lo, hi)
        return col.array()

    # core columns -------------------------------------------------------------------------
    def value(self) -> pa.Array:
        return self._bytes(k.BODY_START, k.BODY_LEN)

    def key(self) -> pa.Array:
        """The first message key: KEYS is always the first properties entry when present."""
        has = self.fields[k.KEY_LEN] != k.NO_KEY
        if not has.any():                       # no keys at all: every key is null
            return pa.nulls(self.n, pa.binary())
        return self._bytes(k.KEY_START, k.KEY_LEN, mask=has)

    # metadata columns ---------------------------------------------------------------------
    def _properties_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(KEYS entries, user properties, TAGS value start, TAGS value length or -1) of
        every record."""
        if self._props_index is None:
            counts = tuple(np.empty(self.n, np.int64) for _ in range(4))
            for lo, hi, data, pos in self.spans:
                bad = k.scan_properties(data, self.fields[k.PROPS_START, lo:hi],
                                        self.fields[k.PROPS_LEN, lo:hi], *counts, lo)
                if bad >= 0:
                    raise CorruptRecordError(f"record at commit-log offset "
                                             f"{int(self.phys[lo + bad])}: properties section "
                                             "is damaged (an entry runs past its end)")
            self._props_index = counts
        return self._props_index

    def tags(self) -> pa.Array:
        _, _, tag_start, tag_len = self._properties_index()
        has = tag_len >= 0
        if not has.any():
            return pa.nulls(self.n, pa.string())
        col = _Column(tag_len, mask=has)
        for lo, hi, data, pos in self.spans:
            col.copy(data, tag_start[lo:hi], lo, hi)
        return _checked_text(col.array(pa.string()), "tags")

    def _entries(self, users: bool) -> tuple[np.ndarray, list[pa.Array]]:
        """List offsets per record and the entries' columns: KEYS values (``users`` false) or
        user property names and values."""
        key_count, user_count, _, _ = self._properties_index()
        offsets = np.zeros(self.n + 1, np.int32)
        np.cumsum(user_count if users else key_count, out=offsets[1:])
        spans = [np.empty(int(offsets[-1]), np.int64) for _ in range(4)]
        for lo, hi, data, pos in self.spans:
            k.property_spans(data, self.fields[k.PROPS_START, lo:hi],
                             self.fields[k.PROPS_LEN, lo:hi], users, int(offsets[lo]), *spans)
        name_starts, name_lens, value_starts, value_lens = spans
        wanted = [(name_starts, name_lens, pa.string()), (value_starts, value_lens, pa.binary())] \
            if users else [(value_starts, value_lens, pa.string())]
        columns = []
        for starts, lens, typ in wanted:
            col = _Column(lens)
            for lo, hi, data, pos in self.spans:
                a, b = int(offsets[lo]), int(offsets[hi])
                col.copy(data, starts[a:b], a, b)
            columns.append(col.array(typ))
        return offsets, columns

    def keys(self, typ: pa.DataType) -> pa.Array:
        """Every message's keys, as a list<string> column of type ``typ``."""
        offsets, (values,) = self._entries(users=False)
        return pa.ListArray.from_arrays(pa.array(offsets), _checked_text(values, "keys"),
                                        type=typ)

    def headers(self, typ: pa.DataType) -> pa.Array:
        """Every message's user properties, as a list<struct<key string, value binary>>
        (header values are the properties' UTF-8 bytes)."""
        offsets, (names, values) = self._entries(users=True)
        entries = pa.StructArray.from_arrays([_checked_text(names, "property names"), values],
                                             fields=list(typ.value_field.type))
        return pa.ListArray.from_arrays(pa.array(offsets), entries, type=typ)

    def msg_ids(self) -> pa.Array:
        """RocketMQ-style ids: the store host's hex, then the commit-log offset's 16 hex
        digits (record.make_msg_id), built for all rows at once when they share one host."""
        flags = self.fields[k.SYS_FLAG]
        host_len = np.where(flags & rec.SYSFLAG_STORE_HOST_V6, 18, 6)
        born_len = np.where(flags & rec.SYSFLAG_BORN_HOST_V6, 18, 6)
        col = _Column(host_len)     # the store host follows the fixed header and the born host
        for lo, hi, data, pos in self.spans:
            col.copy(data, pos + rec.HEADER_SIZE
                     + born_len[lo:hi], lo, hi)
        hosts = col.array()
        distinct = hosts.unique().to_pylist() if self.n else []
        if len(distinct) != 1:
            return pa.array([rec.make_msg_id(rec.decode_host(h, 0, len(h) == 18)[0], off)
                             for h, off in zip(hosts.to_pylist(), self.phys.tolist())],
                            pa.string())
        raw = distinct[0]
        prefix = np.frombuffer(rec.msg_id_prefix(rec.decode_host(raw, 0, len(raw) == 18)[0])
                               .encode(), np.uint8)
        digits = self.phys.astype(">u8").view(np.uint8).reshape(self.n, 8)
        width = len(prefix) + 16
        text = np.empty((self.n, width), np.uint8)
        text[:, :len(prefix)] = prefix
        text[:, len(prefix)::2] = _HEX[digits >> 4]
        text[:, len(prefix) + 1::2] = _HEX[digits & 15]
        return pa.Array.from_buffers(pa.string(), self.n, [
            None, pa.py_buffer(np.arange(self.n + 1, dtype=np.int32) * width),
            pa.py_buffer(text)])


_HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)


def _checked_text(arr: pa.Array, column: str) -> pa.Array:
    """``arr`` if every value is UTF-8 (as strata wrote it); CorruptRecordError if not."""
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise CorruptRecordError(f"the {column} of a record are not UTF-8 text (damaged "
                                 f"record?): {exc}") from None
    return arr


@functools.lru_cache(maxsize=4)
def _one_topic_column(topic: str, n: int) -> pa.Array:
    """``n`` rows of ``topic`` (immutable, so the full batches of a read share one)."""
    tb = topic.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(tb)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(tb * n)])


def _timestamps(ms: np.ndarray, typ: pa.DataType) -> pa.Array:
    """Milliseconds since the epoch as a column of ``typ``. For Spark's timestamp[us] the
    microseconds are taken as they are (``pa.array(values, type)`` converts value by value,
    seven times slower)."""
    us = ms * 1000
    if pa.types.is_timestamp(typ) and typ.unit == "us":
        return pa.array(us).view(typ)
    return pa.array(us, typ)


def _topic_column(topics: list[str], topic_of_row: np.ndarray | None, n: int) -> pa.Array:
    if topic_of_row is None:                     # every row has topics[0]
        return _one_topic_column(topics[0], n)
    names = [t.encode() for t in topics]
    lens = np.array([len(b) for b in names], np.int64)
    starts = np.cumsum(lens) - lens
    col = _Column(lens[topic_of_row])
    col.copy(np.frombuffer(b"".join(names), np.uint8), starts[topic_of_row], 0, n)
    return col.array(pa.string())


def build_batch(records: Records, topics: list[str], topic_of_row: np.ndarray | None,
                queue_of_row: np.ndarray, arrow_schema: pa.Schema) -> pa.RecordBatch:
    """One RecordBatch with exactly ``arrow_schema``'s columns, from the decoded records. Row i
    is of topic ``topics[topic_of_row[i]]`` (``topics[0]`` for all with None) and queue
    ``queue_of_row[i]``."""
    n = records.n
    f = records.fields
    cols = []
    for field in arrow_schema:
        name = field.name
        if name == "value":
            arr = records.value()
        elif name == "key":
            arr = records.key()
        elif name == "topic":
            arr = _topic_column(topics, topic_of_row, n)
        elif name == "queue_id":
            arr = pa.array(queue_of_row.astype(np.int32, copy=False))
        elif name == "queue_offset":
            arr = pa.array(f[k.QUEUE_OFFSET])
        elif name == "timestamp":
            arr = _timestamps(f[k.STORE_TS], field.type)
        elif name == "timestampType":
            arr = pa.array(np.full(n, 1, np.int32))
        elif name == "commitlog_offset":
            arr = pa.array(records.phys)
        elif name == "born_timestamp":
            arr = _timestamps(f[k.BORN_TS], field.type)
        elif name == "msg_id":
            arr = records.msg_ids()
        elif name == "tags":
            arr = records.tags()
        elif name == "keys":
            arr = records.keys(field.type)
        elif name == "headers":
            arr = records.headers(field.type)
        else:
            raise ValueError(f"the strata source has no column {name!r}")
        if arr.type != field.type:
            arr = arr.cast(field.type)
        cols.append(arr)
    return pa.RecordBatch.from_arrays(cols, schema=arrow_schema)
