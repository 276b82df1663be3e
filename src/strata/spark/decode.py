"""Consume-queue units -> Arrow columns, in bulk with numpy (no per-row Python on the core path).

Given the units of one queue (commit-log offset, size) and the commit-log segments, gather each
record's fixed 76-byte header into a structured numpy array, compute where topic, properties and
body start, and cut the variable-length columns out of the memory maps with one fancy-index
gather each. Only the optional metadata/headers columns decode properties row by row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from strata.errors import CorruptRecordError
from strata.format import record as rec

HEADER_AREA = 4096
HDR_DTYPE = np.dtype([
    ("total", "<u4"), ("magic", "<u4"), ("crc", "<u4"), ("queue_id", "<i4"), ("flag", "<i4"),
    ("queue_offset", "<i8"), ("phys", "<i8"), ("sys_flag", "<i4"), ("born_ts", "<i8"),
    ("store_ts", "<i8"), ("prepared", "<i8"), ("reconsume", "<i4"), ("body_len", "<u4"),
    ("topic_len", "<u2"), ("props_len", "<u2")])
assert HDR_DTYPE.itemsize == rec.HEADER_SIZE
_KEYS_NAME = np.frombuffer(b"\x04\x00KEYS", np.uint8)
_HOST_V6 = rec.SYSFLAG_BORN_HOST_V6 | rec.SYSFLAG_STORE_HOST_V6


def _validity(mask: np.ndarray) -> pa.Buffer | None:
    if mask.all():
        return None
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def _binary(data: np.ndarray, starts: np.ndarray, lens: np.ndarray, typ=pa.binary(),
            mask: np.ndarray | None = None) -> pa.Array:
    """A binary/string array of ``data[starts[i]:starts[i]+lens[i]]`` (null where not mask)."""
    lens = lens.astype(np.int64)
    if mask is not None:
        lens = np.where(mask, lens, 0)
    offsets = np.empty(len(lens) + 1, np.int64)
    offsets[0] = 0
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31:
        raise ValueError("an Arrow batch would exceed 2 GiB of one column; "
                         "lower option 'maxRecordsPerBatch'")
    if total:
        blob = _gather(data, starts.astype(np.int64, copy=False), lens, offsets, total)
    else:
        blob = np.empty(0, np.uint8)
    validity = _validity(mask) if mask is not None else None
    return pa.Array.from_buffers(typ, len(lens), [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(blob)])


def _rows(data: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``data[s:s+width]`` for every start, as an (n, width) uint8 array. The windows are
    seen as opaque ``width``-byte items, so numpy copies each row as one block (about ten
    times faster than element by element through a 2-D window view, and far faster than a
    per-byte index array)."""
    windows = np.ndarray(shape=(max(0, len(data) - width + 1),), dtype=(np.void, width),
                         buffer=data, strides=(1,))
    return windows[starts].view(np.uint8).reshape(len(starts), width)


def _gather(data: np.ndarray, starts: np.ndarray, lens: np.ndarray, offsets: np.ndarray,
            total: int) -> np.ndarray:
    """The bytes ``data[starts[i]:starts[i]+lens[i]]`` of every row, concatenated."""
    width = int(lens.max())
    n = len(lens)
    # Row copies of the longest length, then the padding masked away: cheap while the rows
    # are of similar length and every window stays inside the buffer.
    if width and n * width <= 2 * total + (1 << 20) and int(starts.max()) + width <= len(data):
        rows = _rows(data, starts, width)
        if int(lens.min()) == width:
            return rows.reshape(-1)
        return rows[np.arange(width) < lens[:, None]]
    idx = np.repeat(starts - offsets[:-1], lens)
    idx += np.arange(total, dtype=np.int64)
    return data[idx]


def _u16(data: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return data[pos].astype(np.int64) | (data[pos + 1].astype(np.int64) << 8)


class Chunk:
    """The records of a run of units that all live in one commit-log segment."""

    def __init__(self, data: np.ndarray, mm, pos: np.ndarray, phys: np.ndarray) -> None:
        self.data, self.mm, self.pos = data, mm, pos
        hdr = _rows(data, pos, rec.HEADER_SIZE).view(HDR_DTYPE).ravel()
        if (hdr["magic"] != rec.MESSAGE_MAGIC).any() or (hdr["phys"] != phys).any():
            bad = (hdr["magic"] != rec.MESSAGE_MAGIC) | (hdr["phys"] != phys)
            at = int(phys[np.argmax(bad)])
            raise CorruptRecordError(f"no message record at commit-log offset {at} "
                                     "although a consume queue points there")
        self.hdr = hdr
        six = hdr["sys_flag"] & _HOST_V6
        if six.any():
            self.born_host_len = np.where(six & rec.SYSFLAG_BORN_HOST_V6, 18, 6)
            hosts = self.born_host_len + np.where(six & rec.SYSFLAG_STORE_HOST_V6, 18, 6)
        else:                                   # IPv4 hosts only: the usual case, no arrays
            self.born_host_len, hosts = 6, 12
        self.body_start = pos + (rec.HEADER_SIZE + hosts)
        self.body_start += hdr["topic_len"]
        self.body_start += hdr["props_len"]
        self.n = len(pos)

    @property
    def props_len(self) -> np.ndarray:
        return self.hdr["props_len"].astype(np.int64)

    @property
    def props_start(self) -> np.ndarray:
        return self.body_start - self.props_len

    # core columns -------------------------------------------------------------------------
    def value(self) -> pa.Array:
        return _binary(self.data, self.body_start, self.hdr["body_len"])

    def key(self) -> pa.Array:
        """The first message key: KEYS is always the first properties entry when present."""
        has = self.hdr["props_len"] >= 8
        if not has.any():                       # no properties at all: every key is null
            return pa.nulls(self.n, pa.binary())
        p = np.where(has, self.props_start, 0)
        name = _rows(self.data, p, 6)
        has &= (name == _KEYS_NAME).all(axis=1)
        vlen = np.where(has, _u16(self.data, p + 6), 0)
        return _binary(self.data, p + 8, vlen, mask=has)

    def queue_offset(self) -> np.ndarray:
        return self.hdr["queue_offset"]

    def store_ts_us(self) -> np.ndarray:
        return self.hdr["store_ts"] * 1000

    def born_ts_us(self) -> np.ndarray:
        return self.hdr["born_ts"] * 1000

    def phys(self) -> np.ndarray:
        return self.hdr["phys"]

    # metadata columns (row by row over the small properties section) --------------------
    def properties(self) -> list[tuple[tuple[str, ...], str | None, dict[str, str]]]:
        mm = self.mm
        out = []
        for s, n in zip((self.props_start).tolist(), self.props_len.tolist()):
            out.append(rec.decode_properties(mm[s:s + n]) if n else ((), None, {}))
        return out

    def msg_ids(self) -> list[str]:
        mm = self.mm
        out = []
        store_at = (self.pos + rec.HEADER_SIZE + self.born_host_len).tolist()
        v6 = (self.hdr["sys_flag"] & rec.SYSFLAG_STORE_HOST_V6).astype(bool).tolist()
        for at, six, off in zip(store_at, v6, self.hdr["phys"].tolist()):
            host, _ = rec.decode_host(mm, at, six)
            out.append(rec.make_msg_id(host, off))
        return out


def chunks_for(segments, phys: np.ndarray) -> list[Chunk]:
    """Split units (sorted by commit-log offset) into per-segment chunks and decode headers."""
    bases = np.array([s.base_offset for s in segments], np.int64)
    which = np.searchsorted(bases, phys, side="right") - 1
    if len(phys) and which.min() < 0:
        raise CorruptRecordError(f"commit-log offset {int(phys[np.argmin(which)])} is below the "
                                 "oldest segment (deleted by retention?)")
    out = []
    cuts = np.flatnonzero(np.diff(which)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(phys)]):
        if lo == hi:
            continue
        seg = segments[int(which[lo])]
        data = np.frombuffer(seg.mm, np.uint8)
        p = phys[lo:hi]
        out.append(Chunk(data, seg.mm, HEADER_AREA + (p - seg.base_offset), p))
    return out


def _concat(parts: list) -> pa.Array:
    return pa.concat_arrays(parts) if len(parts) != 1 else parts[0]


def _topic_column(topics: list[str], topic_of_row: np.ndarray | None, n: int) -> pa.Array:
    if topic_of_row is None:                     # every row has topics[0]
        tb = topics[0].encode()
        offsets = np.arange(n + 1, dtype=np.int32) * len(tb)
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(tb * n)])
    names = [t.encode() for t in topics]
    lens = np.array([len(b) for b in names], np.int64)
    starts = np.cumsum(lens) - lens
    blob = np.frombuffer(b"".join(names) + bytes(int(lens.max())), np.uint8)
    return _binary(blob, starts[topic_of_row], lens[topic_of_row], pa.string())


def build_batch(chunks: list[Chunk], topics: list[str], topic_of_row: np.ndarray | None,
                queue_of_row: np.ndarray, arrow_schema: pa.Schema) -> pa.RecordBatch:
    """One RecordBatch with exactly ``arrow_schema``'s columns, from the decoded chunks. Row i
    is of topic ``topics[topic_of_row[i]]`` (``topics[0]`` for all with None) and queue
    ``queue_of_row[i]``."""
    n = sum(c.n for c in chunks)
    cols = []
    props = None
    for field in arrow_schema:
        name = field.name
        if name == "value":
            arr = _concat([c.value() for c in chunks])
        elif name == "key":
            arr = _concat([c.key() for c in chunks])
        elif name == "topic":
            arr = _topic_column(topics, topic_of_row, n)
        elif name == "queue_id":
            arr = pa.array(queue_of_row.astype(np.int32, copy=False))
        elif name == "queue_offset":
            arr = pa.array(np.concatenate([c.queue_offset() for c in chunks]))
        elif name == "timestamp":
            arr = pa.array(np.concatenate([c.store_ts_us() for c in chunks]), field.type)
        elif name == "timestampType":
            arr = pa.array(np.full(n, 1, np.int32))
        elif name == "commitlog_offset":
            arr = pa.array(np.concatenate([c.phys() for c in chunks]))
        elif name == "born_timestamp":
            arr = pa.array(np.concatenate([c.born_ts_us() for c in chunks]), field.type)
        elif name == "msg_id":
            arr = pa.array([m for c in chunks for m in c.msg_ids()], pa.string())
        elif name in ("tags", "keys", "headers"):
            if props is None:
                props = [p for c in chunks for p in c.properties()]
            if name == "tags":
                arr = pa.array([p[1] for p in props], pa.string())
            elif name == "keys":
                arr = pa.array([list(p[0]) for p in props], field.type)
            else:
                arr = pa.array([[{"key": k, "value": v.encode()} for k, v in p[2].items()]
                                for p in props], field.type)
        else:
            raise ValueError(f"the strata source has no column {name!r}")
        if arr.type != field.type:
            arr = arr.cast(field.type)
        cols.append(arr)
    return pa.RecordBatch.from_arrays(cols, schema=arrow_schema)
