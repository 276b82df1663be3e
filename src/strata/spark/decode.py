"""Commit-log records -> Arrow columns, in bulk (no per-row Python on the core path).

Given a batch's commit-log offsets (sorted) and the commit-log segments, a compiled pass
(kernels.scan_headers) checks every record and reads its header fields into numpy arrays, and
the variable-length columns (value, key, topic) are copied straight from the memory maps into
Arrow buffers (kernels.gather). Only the optional metadata/headers columns decode the small
properties section row by row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from strata.errors import CorruptRecordError
from strata.format import record as rec
from strata.format.segment import HEADER_AREA
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
    """The records at a batch's commit-log offsets: every header field as a numpy array
    (``fields[kernels.BODY_LEN]`` ...), and the runs of rows that lie in each segment."""

    def __init__(self, segments, phys: np.ndarray) -> None:
        self.phys = phys
        self.n = len(phys)
        self.fields = np.empty((k.FIELDS, self.n), np.int64)
        # (first row, end row, segment) of each segment's run of rows
        self.spans: list[tuple[int, int, object]] = []
        bases = np.array([s.base_offset for s in segments], np.int64)
        which = np.searchsorted(bases, phys, side="right") - 1
        if self.n and which.min() < 0:
            raise CorruptRecordError(f"commit-log offset {int(phys[np.argmin(which)])} is below "
                                     "the oldest segment (deleted by retention?)")
        cuts = np.flatnonzero(np.diff(which)) + 1
        for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, self.n].tolist()):
            seg = segments[int(which[lo])]
            self.spans.append((lo, hi, seg))
            bad = k.scan_headers(self._map(seg), self._positions(lo, hi, seg), phys[lo:hi],
                                 self.fields, lo)
            if bad >= 0:
                raise CorruptRecordError(f"no intact message record at commit-log offset "
                                         f"{int(phys[lo + bad])} although a consume queue "
                                         "points there")

    @staticmethod
    def _map(seg) -> np.ndarray:
        return np.frombuffer(seg.mm, np.uint8)

    def _positions(self, lo: int, hi: int, seg) -> np.ndarray:
        """Byte positions of rows lo..hi in their segment's map."""
        return HEADER_AREA + (self.phys[lo:hi] - seg.base_offset)

    def _bytes(self, start_row: int, len_row: int, mask: np.ndarray | None = None) -> pa.Array:
        col = _Column(self.fields[len_row], mask)
        for lo, hi, seg in self.spans:
            col.copy(self._map(seg), self.fields[start_row, lo:hi], lo, hi)
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

    # metadata columns (row by row over the small properties section) --------------------
    def properties(self) -> list[tuple[tuple[str, ...], str | None, dict[str, str]]]:
        out = []
        for lo, hi, seg in self.spans:
            mm = seg.mm
            for s, n in zip(self.fields[k.PROPS_START, lo:hi].tolist(),
                            self.fields[k.PROPS_LEN, lo:hi].tolist()):
                out.append(rec.decode_properties(mm[s:s + n]) if n else ((), None, {}))
        return out

    def msg_ids(self) -> list[str]:
        out = []
        for lo, hi, seg in self.spans:
            flags = self.fields[k.SYS_FLAG, lo:hi]
            # the store host follows the fixed header and the born host
            store_at = self._positions(lo, hi, seg) + rec.HEADER_SIZE + np.where(
                flags & rec.SYSFLAG_BORN_HOST_V6, 18, 6)
            v6 = (flags & rec.SYSFLAG_STORE_HOST_V6).astype(bool).tolist()
            for at, six, off in zip(store_at.tolist(), v6, self.phys[lo:hi].tolist()):
                host, _ = rec.decode_host(seg.mm, at, six)
                out.append(rec.make_msg_id(host, off))
        return out


def _topic_column(topics: list[str], topic_of_row: np.ndarray | None, n: int) -> pa.Array:
    if topic_of_row is None:                     # every row has topics[0]
        tb = topics[0].encode()
        offsets = np.arange(n + 1, dtype=np.int32) * len(tb)
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(tb * n)])
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
    props = None
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
            arr = pa.array(f[k.STORE_TS] * 1000, field.type)
        elif name == "timestampType":
            arr = pa.array(np.full(n, 1, np.int32))
        elif name == "commitlog_offset":
            arr = pa.array(records.phys)
        elif name == "born_timestamp":
            arr = pa.array(f[k.BORN_TS] * 1000, field.type)
        elif name == "msg_id":
            arr = pa.array(records.msg_ids(), pa.string())
        elif name in ("tags", "keys", "headers"):
            if props is None:
                props = records.properties()
            if name == "tags":
                arr = pa.array([p[1] for p in props], pa.string())
            elif name == "keys":
                arr = pa.array([list(p[0]) for p in props], field.type)
            else:
                arr = pa.array([[{"key": k_, "value": v.encode()} for k_, v in p[2].items()]
                                for p in props], field.type)
        else:
            raise ValueError(f"the strata source has no column {name!r}")
        if arr.type != field.type:
            arr = arr.cast(field.type)
        cols.append(arr)
    return pa.RecordBatch.from_arrays(cols, schema=arrow_schema)
