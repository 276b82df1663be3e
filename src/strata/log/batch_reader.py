"""Reading the commit log's records at known offsets (a queue's units: ``get``, ``read_at``
batches) in one compiled pass per segment.

``read_offsets`` runs ``record_kernels.check_at`` over a segment's map — magic, lengths at
both ends, field lengths, own offset, CRC32C, and optionally that each record is the unit's
own message — and hands out a ``MessageBatch`` whose messages are made only when read. Its
sibling for records that follow one another (``scan``, recovery, ``verify``) is
``record_walk``, over the same kernels. Damage is judged as the per-record readers judge it
(``record.record_damage``), on the slow path only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strata.files.segment import MappedSegment
from strata.files.segment_queue import segment_runs
from strata.format import record as rec
from strata.format import record_table as rk
from strata.format.consume_queue import UNIT_SIZE
from strata.format.record_batch import MessageBatch, join_parts
from strata.format.segment import HEADER_AREA
from strata.log.record_walk import segment_map

_EMPTY_TOPIC = np.zeros(0, np.uint8)
_NO_QUEUE_OFFSETS = np.zeros(0, np.int64)
class OffsetsRead:
    """What ``read_offsets`` found at each of n offsets: ``status`` (record_kernels.GOOD /
    OTHER / NO_RECORD / CRC_MISMATCH), ``messages`` (the GOOD ones, in order), ``damaged``
    (index -> why, as ``record_damage`` says) and ``all_good`` (every one GOOD). A plain
    class with slots: a get makes one a call."""

    __slots__ = ("status", "messages", "damaged", "all_good")

    def __init__(self, status: np.ndarray, messages: MessageBatch,
                 damaged: dict[int, str] | None = None, all_good: bool | None = None) -> None:
        self.status, self.messages = status, messages
        self.damaged = {} if damaged is None else damaged
        self.all_good = len(messages) == len(status) if all_good is None else all_good

    def as_list(self) -> list[rec.StoredMessage | None]:
        """One entry per offset: the message where GOOD, else None."""
        out: list[rec.StoredMessage | None] = [None] * len(self.status)
        for i, m in zip(np.flatnonzero(self.status == rk.GOOD).tolist(), self.messages):
            out[i] = m
        return out


class _Kernels:
    """The compiled reader's functions ``read_offsets`` calls, looked up once (not two
    imports a call)."""

    def __init__(self) -> None:
        k = rk.kernels()
        self.check_at, self.pack_to = k.check_at, k.pack_to
        self.new_bytes = rk.objects().new_bytes


_KERNELS: _Kernels | None = None


def _load_kernels() -> _Kernels:
    global _KERNELS
    _KERNELS = _Kernels()
    return _KERNELS


def read_offsets(segments: list[MappedSegment], offsets: np.ndarray, limit: int, *,
                 verify_crc: bool, topic: str | None = None, queue_id: int = -1,
                 queue_offsets: np.ndarray | None = None,
                 topics: dict[bytes, str] | None = None) -> OffsetsRead:
    """Check and read the message records at commit-log ``offsets`` (ascending) below
    ``limit``. With ``topic`` and ``queue_id`` a record is GOOD only if it is message
    ``queue_offsets[i]`` of that queue (else OTHER: the unit leads to another record).
    ``damaged`` names each offset where that offset's record is, but damaged. The batch holds
    a copy of the good records, or, when they are all good, large and (nearly) back to back
    in one segment (``_in_place``), a view of the map over them: no copy until its messages
    are made, each body then copied once (``MessageBatch._scanned``); the CRC32C is checked
    here either way."""
    kernels = _KERNELS or _load_kernels()
    new_bytes = kernels.new_bytes
    offsets = np.asarray(offsets, np.int64)
    n = len(offsets)
    status = np.empty(n, np.uint8)   # check_at writes every row it is given
    # kept by the batch (no copy) when all good; its rows 8 columns further apart than n, as
    # ``record_walk.field_table``'s (rows 8 KiB apart share one L1 set: n = 1024 ran ~25 %
    # slower than n = 1000)
    fields = np.empty((rk.FIELDS, n + 8), np.int64)[:, :n]
    name = _EMPTY_TOPIC if topic is None else topic_array(topic)
    qid = -1 if topic is None else queue_id
    qoffs = _NO_QUEUE_OFFSETS if topic is None else np.asarray(queue_offsets, np.int64)
    parts: list[tuple[bytes, np.ndarray]] = []   # (variable parts, fields of GOOD rows)
    damaged: dict[int, str] = {}
    goods = 0
    for lo, hi, seg in offset_runs(segments, offsets):
        if seg is None or seg.closed:
            status[lo:hi] = rk.NO_RECORD
            continue
        end = HEADER_AREA + max(0, min(seg.committed, limit - seg.base_offset))
        if hi - lo == n:   # the usual read, in one segment: the arrays as they are (no slices)
            offs, f, st, qo = offsets, fields, status, qoffs
        else:
            offs, f, st = offsets[lo:hi], fields[:, lo:hi], status[lo:hi]
            qo = qoffs[lo:hi] if qid >= 0 else qoffs
        pos = offs - (seg.base_offset - HEADER_AREA)   # (one numpy op, not two)
        try:
            data = segment_map(seg)
            good, nbytes = kernels.check_at(data, pos, offs, end, verify_crc, name, qid, qo, f,
                                            st)
            goods += good
            if good == n > 0 and nbytes >= IN_PLACE_MIN_BYTES * n and _in_place(f, nbytes):
                # every record good, lying (nearly) back to back: the batch is a view of the
                # map over them, no copy; its messages' bodies are copied once, from the map
                start = int(f[rk.F_HOSTS_AT, 0])
                f[rk.F_HOSTS_AT:rk.F_BODY_END + 1] -= start
                parts.append((data[start:start + int(f[rk.F_BODY_END, n - 1])], f))
                continue
            buf, address = new_bytes(nbytes)   # the records copied once, into the batch's bytes
            kernels.pack_to(data, f, st, address)
            parts.append((buf, f if good == hi - lo else f[:, :good].copy()))
            if good < hi - lo:
                for i in np.flatnonzero(st >= rk.NO_RECORD).tolist():
                    why = rec.record_damage(seg.mm, int(pos[i]), end, int(offsets[lo + i]))
                    if why is not None:
                        damaged[lo + i] = why
        except ValueError:   # closed by retention just now
            status[lo:hi] = rk.NO_RECORD
    if len(parts) == 1:
        batch = MessageBatch(parts[0][0], parts[0][1], topic, topics)
    else:
        batch = join_parts(parts, topic, topics)
    return OffsetsRead(status, batch, damaged, goods == n)


# A get's batch is a view of the segment's map when its records span at most this many times
# the bytes a packed copy would hold (one queue's records lie back to back; a view over many
# queues' records would keep far more of the map alive than it hands out) ...
IN_PLACE_SPAN = 2
# ... and they average at least this many bytes: below it the copy into the batch costs no
# more than making the messages from the map does (their hosts, topic and properties then go
# into a buffer of their own, so that no message keeps the map alive:
# ``MessageBatch._scanned``). Side by side, get of 1000 with every body read, ns a message:
# 1 KiB 321-345 in place against 440-458 packed, 768 B 265-267 / 321-357, 512 B and 300 B
# within the noise, 100 B slower in place (133 / 121)
IN_PLACE_MIN_BYTES = 640


def _in_place(f: np.ndarray, nbytes: int) -> bool:
    """Whether the good records of table ``f`` (n > 0 columns, ascending positions in the map;
    ``nbytes`` packed bytes, already at least ``IN_PLACE_MIN_BYTES`` each: the caller tests
    that first, as it costs no call) lie (nearly) back to back, so are read in place."""
    n = f.shape[1]
    return int(f[rk.F_BODY_END, n - 1]) - int(f[rk.F_HOSTS_AT, 0]) <= IN_PLACE_SPAN * nbytes


def offset_runs(segments: list[MappedSegment], offsets: np.ndarray):
    """``segment_runs``, with the usual case (every offset in the newest segment) made quick."""
    if len(offsets) and segments:
        last = segments[-1]
        if last.base_offset <= int(offsets[0]) and int(offsets[-1]) < last.end_offset:
            return [(0, len(offsets), last)]
    return segment_runs(segments, offsets)


@dataclass
class ColumnsRead:
    """Records read as columns (``read_columns``): the field table (``record_kernels.F_*``
    rows; positions meaningless, the data was copied out) and the bodies and properties
    sections of the records, each packed into one buffer with n + 1 offsets."""

    fields: np.ndarray
    bodies: np.ndarray
    body_offsets: np.ndarray
    properties: np.ndarray
    prop_offsets: np.ndarray


def read_columns(segments: list[MappedSegment], offsets: np.ndarray, limit: int, *,
                 verify_crc: bool, topic: str, queue_id: int,
                 queue_offsets: np.ndarray) -> ColumnsRead | None:
    """``read_offsets`` for a reader that wants columns: each record checked in the one
    compiled pass (CRC32C, and that it is message ``queue_offsets[i]`` of ``topic`` /
    ``queue_id``), then its body and properties copied once, straight from the segment's map,
    into a bodies buffer and a properties buffer. None unless every record is GOOD (the caller
    then takes the per-record path, which says what is wrong)."""
    from strata.format import column_kernels as ck
    kernels = rk.kernels()
    offsets = np.ascontiguousarray(offsets, np.int64)
    n = len(offsets)
    status = np.empty(n, np.uint8)
    fields = np.empty((rk.FIELDS, n), np.int64)
    name = topic_array(topic)
    runs = offset_runs(segments, offsets)
    if len(runs) == 1:   # the usual read, within one segment: one compiled call
        _lo, _hi, seg = runs[0]
        mapped = _mapped(seg, limit)
        if mapped is None:
            return None
        data, end = mapped
        body_off = np.empty(n + 1, np.int64)
        prop_off = np.empty(n + 1, np.int64)
        good, bodies, props = ck.columns_at(
            data, offsets - (seg.base_offset - HEADER_AREA), offsets, end, verify_crc, name,
            queue_id, queue_offsets, fields, status, body_off, prop_off)
        if good < n:
            return None
        return ColumnsRead(fields, bodies, body_off, props, prop_off)
    parts = []
    for lo, hi, seg in runs:
        mapped = _mapped(seg, limit)
        if mapped is None:
            return None
        data, end = mapped
        good, _nbytes = kernels.check_at(data, offsets[lo:hi] - (seg.base_offset - HEADER_AREA),
                                         offsets[lo:hi], end, verify_crc, name, queue_id,
                                         queue_offsets[lo:hi], fields[:, lo:hi], status[lo:hi])
        if good < hi - lo:
            return None
        parts.append((lo, hi, data))
    body_off = np.empty(n + 1, np.int64)
    prop_off = np.empty(n + 1, np.int64)
    ck.section_offsets(fields, rk.F_BODY_AT, rk.F_BODY_END, body_off, prop_off)
    bodies = np.empty(int(body_off[-1]), np.uint8)
    props = np.empty(int(prop_off[-1]), np.uint8)
    for lo, hi, data in parts:
        ck.gather_sections(data, fields, lo, hi - lo, rk.F_BODY_AT, rk.F_BODY_END, body_off,
                           prop_off, bodies, props)
    return ColumnsRead(fields, bodies, body_off, props, prop_off)


@dataclass
class ViewsRead:
    """Records read as Arrow views (``read_views``): the views table (``record_table.V_*``
    rows: offsets, timestamps, positions in ``span``), the records (``span``: a view of
    the segment's map, or ONE copy of them), the 16-byte ``binary_view`` views of their
    bodies and of their properties sections into it (int32, 4 a record), and how many bytes
    of properties there are in all (0: no keys to look for)."""

    fields: np.ndarray
    span: np.ndarray
    body_views: np.ndarray
    prop_views: np.ndarray
    prop_bytes: int


_VIEWS = None


def _load_views():
    """``strata.format.view_kernels``, imported on first use (numba) and kept."""
    global _VIEWS
    from strata.format import view_kernels
    _VIEWS = view_kernels
    return _VIEWS


def read_views(seg: MappedSegment, units: np.ndarray, limit: int, *, verify_crc: bool,
               topic: str, queue_id: int, first_offset: int, in_place: bool = True,
               table: np.ndarray | None = None, views: np.ndarray | None = None
               ) -> ViewsRead | bool:
    """``read_columns`` for a reader that takes ``binary_view`` columns: the records of
    consume-queue ``units`` (their bytes, a copy) — messages ``first_offset``, ``first_offset
    + 1``, ... of the queue — all in segment ``seg``, checked in one compiled pass
    (``view_kernels.views_at``, the CRC32C with ``verify_crc``). With ``in_place`` records
    that lie back to back are not copied: the views point into the segment's map, and the
    span handed out is a numpy view of it that keeps the map alive (past the segment's
    close or deletion). Others are copied once and the views written over the copy. True
    if they add up to more than int32 views reach (``read_columns`` can read them), False
    if some record is not as it must be (the per-record path says why). ``table`` (int64,
    ``VIEW_FIELDS`` × n) and ``views`` (int32, 2 × 4n) are where the views table and views
    go (made here if not given: ``get_columns`` gives slices of its one buffer)."""
    vk = _VIEWS or _load_views()
    mapped = map_for_views(seg, limit)
    if mapped is None:
        return False
    n = len(units) // UNIT_SIZE
    if table is None:
        table = np.empty((rk.VIEW_FIELDS, n), np.int64)
    if views is None:
        views = np.empty((2, 4 * n), np.int32)
    data, base, end = mapped
    good, span, prop_bytes, start, own = vk.views_at(
        data, units, base, end, verify_crc,
        topic_array(topic), queue_id, first_offset, table, views, in_place)
    if good < n:
        return good < 0
    if start >= 0:   # the records where they lie: a view of the map keeps the map alive
        span = data[start:start + own]
    return ViewsRead(table, span, views[0], views[1], prop_bytes)


_TOPICS: dict[str, np.ndarray] = {}


def _mapped(seg: MappedSegment | None, limit: int) -> tuple[np.ndarray, int] | None:
    """A segment's map and the end (in map positions) of what may be read below commit-log
    offset ``limit``; None if the segment is gone (closed by retention just now)."""
    if seg is None or seg.closed:
        return None
    try:
        data = segment_map(seg)
    except ValueError:   # closed by retention just now
        return None
    return data, HEADER_AREA + max(0, min(seg.committed, limit - seg.base_offset))


def map_for_views(seg: MappedSegment | None, limit: int) -> tuple[np.ndarray, int, int] | None:
    """For a compiled reader over a segment's map (``get_columns``' one call,
    ``arrow_c.read_batch``): (the map as uint8, what to take off a commit-log offset for its
    position in the map, the end of what may be read below ``limit``); None if the segment
    is gone."""
    got = _mapped(seg, limit)
    if got is None:
        return None
    return got[0], seg.base_offset - HEADER_AREA, got[1]


def topic_array(topic: str) -> np.ndarray:
    """A topic's name as uint8 (cached: a reader asks for the same few topics)."""
    a = _TOPICS.get(topic)
    if a is None:
        a = np.frombuffer(topic.encode("ascii"), np.uint8)
        if len(_TOPICS) < 1024:
            _TOPICS[topic] = a
    return a
