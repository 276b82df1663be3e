"""Walk commit-log segments and get past damage: the record walker that recovery,
``strata verify``, ``store.scan()`` and ``iter_records`` share.

A message record is good when its magic, its length at both ends, its field lengths and its
physical-offset field (== segment base + position) agree, and its CRC32C where the walk checks
CRCs. At a bad record the walker resynchronises: the next position whose bytes are a good
record of that very offset with a matching CRC (found by searching for the magic; runs of
zeros are skipped at memory speed, ``MappedSegment.next_nonzero``), or a good blank record
that reaches the segment's end. Everything in between is one ``Damage``. A stretch with no good record after it
runs to the end of the walk, and ``zeros_from`` says where its final run of zeros starts
(recovery keeps the bytes before it aside when it cuts a torn tail: docs/recovery.md).

Good records are found in runs by one compiled pass (``record_kernels.walk``: the checks of
``record.check_record`` over a segment's map); only at a record that fails it does Python
take over (``record_problem``, ``resync``).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from itertools import repeat
from typing import Iterator

import numpy as np

from strata.errors import CorruptRecordError
from strata.files.segment import MappedSegment
from strata.files.segment_queue import SegmentQueue
from strata.format import record as rec
from strata.format import record_table as rk
from strata.format.record_batch import MessageBatch
from strata.format.segment import HEADER_AREA

WALK_ROWS = 1024   # records per run
# A scan's runs (its batches of messages): up to SCAN_ROWS records, about SCAN_RUN_BYTES of
# them once the walk has seen how large they are. Per batch the walk, the batch and its
# message list cost a few µs (~3-4 ns a message at 1024 rows of 100 B); past ~1 MiB of records
# a batch (its records, field tables and objects) no longer stays in a core's cache. Side by
# side, scan reading every body, ns a message: 100 B at 1024 / 2048 / 4096 rows 105-109 /
# 102-105 / 100-103, 1 KiB 271-290 at 1024, 261-329 at 2048, 397-405 at 4096.
SCAN_ROWS = 4096
SCAN_RUN_BYTES = 1 << 20

# Per-thread tables a read fills before copying out what it keeps: memory touched for the first
# time costs more here than the reads themselves (DESIGN.md, ~1 ns a byte), so it is reused.
_scratch = threading.local()


def scratch(kind: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """This thread's reusable array ``kind`` of ``shape`` (C-contiguous: the compiled code
    runs about twice as fast over contiguous tables), carved from one flat buffer that
    grows as needed. Valid until this thread asks for ``kind`` again."""
    size = math.prod(shape)
    arr = getattr(_scratch, kind, None)
    if arr is None or arr.dtype != dtype or len(arr) < size:
        arr = np.empty(max(size, 16384), dtype)
        setattr(_scratch, kind, arr)
    return arr[:size].reshape(shape)

def field_table(kind: str, n: int) -> np.ndarray:
    """This thread's reusable ``(record_table.FIELDS, n)`` int64 table ``kind`` (``scratch``)
    with its rows 8 columns apart more than ``n``: a kernel that fills a record's column
    stores one value into each of the 15 rows, and rows exactly 8 KiB apart (``n`` = 1024)
    all fall in the same set of the L1 cache (and alias by 4 KiB), so those stores evicted
    one another — the walk ran ~1.8× slower over records in cache. (Not C-contiguous: the
    kernels take any layout.)"""
    return scratch(kind, (rk.FIELDS, n + 8), np.int64)[:, :n]


_MESSAGE = rec.U32.pack(rec.MESSAGE_MAGIC)
_BLANK = rec.U32.pack(rec.BLANK_MAGIC)


@dataclass(frozen=True)
class Damage:
    """Bytes ``[offset, offset + length)`` of the commit log hold no good record; ``why`` says
    what failed at ``offset`` (the first bad record's problem)."""

    offset: int
    length: int
    why: str

    @property
    def end(self) -> int:
        return self.offset + self.length

    def __str__(self) -> str:
        return f"offset {self.offset} ({self.why}; {self.length} bytes passed over)"


def record_problem(seg: MappedSegment, pos: int, end: int, *, verify_crc: bool) -> tuple[int, int, str | None]:
    """Check the record at data byte ``pos`` of ``seg`` (below data byte ``end``): (kind, size,
    None) if it is good, (0, 0, why) if not."""
    mm = seg.mm
    p = HEADER_AREA + pos
    try:
        kind, size = rec.check_record(mm, p, HEADER_AREA + end, verify_crc=verify_crc)
    except CorruptRecordError as exc:
        return 0, 0, str(exc)
    if kind == rec.RecordKind.BLANK:
        if pos + size != seg.data_size:
            return 0, 0, (f"blank record of {size} bytes ends at data byte {pos + size}, not at "
                          f"the segment's end {seg.data_size}")
        return kind, size, None
    phys = rec.I64_AT.unpack_from(mm, p + rec.POS_PHYSICAL_OFFSET)[0]
    if phys != seg.base_offset + pos:
        return 0, 0, f"record claims offset {phys} (stale bytes from an earlier write?)"
    return kind, size, None


RESYNC_WINDOW = 1 << 16   # bytes searched for a magic at a time during a resync


def resync(seg: MappedSegment, pos: int, end: int) -> int:
    """The first data byte after ``pos`` (and below ``end``) where a good record starts (CRC
    checked: a message record of that very offset, or a blank record reaching the segment's
    end); ``end`` if there is none."""
    return resync_span(seg, pos, end)[0]


def resync_span(seg: MappedSegment, pos: int, end: int) -> tuple[int, int]:
    """``resync``, and where the zeros that end the search start: ``(next, zeros_from)``.
    When no good record follows, data bytes ``[zeros_from, end)`` are all zero (``end`` when
    a good record was found). Runs of zeros are skipped without a search (a record starts
    with its non-zero length), so looking ahead through a segment's unwritten rest costs
    one pass at memory speed, not a byte search."""
    mm = seg.mm
    lo = pos + 1                           # lowest record start still possible
    while lo < end:
        nz = seg.next_nonzero(lo, end)
        if nz >= end:
            return end, lo
        lo = max(lo, nz - 3)               # the length field's first non-zero byte
        hi = min(end, lo + RESYNC_WINDOW)  # record starts in [lo, hi) are tried now
        a = HEADER_AREA + lo + 4           # the magic sits 4 bytes into a record
        b = min(HEADER_AREA + end, HEADER_AREA + hi + 8)
        hits = [h for h in (mm.find(_MESSAGE, a, b), mm.find(_BLANK, a, b)) if h >= 0]
        q = min(hits) - 4 - HEADER_AREA if hits else hi
        if q >= hi:
            lo = hi
            continue
        _kind, _size, why = record_problem(seg, q, end, verify_crc=True)
        if why is None:
            return q, end
        lo = q + 1
    return end, end


def segment_map(seg: MappedSegment) -> np.ndarray:
    """The whole mapping of ``seg`` as uint8 (pins the map while it lives; ValueError if the
    segment was closed): the segment's own array, made when it was opened."""
    data = seg.array
    if data is None:
        raise ValueError(f"segment {seg.path.name} is closed")
    return data


@dataclass
class Run:
    """Good message records one after another in ``seg``: their fields
    (``fields[record_kernels.F_*]``, positions in ``data``, the segment's map). The walk
    reuses the table: a Run is valid until the walk is asked for the next item (``messages()``
    copies what it needs)."""

    seg: MappedSegment
    data: np.ndarray
    fields: np.ndarray

    def __len__(self) -> int:
        return self.fields.shape[1]

    @property
    def positions(self) -> np.ndarray:
        """Data-byte positions of the records in the segment."""
        return self.fields[rk.F_HOSTS_AT] - (rec.HEADER_SIZE + HEADER_AREA)

    @property
    def sizes(self) -> np.ndarray:
        return self.fields[rk.F_TOTAL]

    def messages(self, topics: dict[bytes, str] | None = None) -> MessageBatch:
        """The records as a MessageBatch of messages made now, each field copied out of the
        map (so it outlives the segment)."""
        return MessageBatch.made(self.data, self.fields, None, topics)


class RecordWalk:
    """The records of ``seg`` in data bytes ``[start, end)`` (``start`` a record start).

    ``runs()`` yields a ``Run`` per stretch of good records (checked by the compiled
    ``record_kernels.walk``, up to ``rows`` a run) and a ``Damage`` per damaged stretch;
    iterating the walk yields ``(position, size, None)`` per good message record and
    ``(position, length, why)`` per damaged stretch. CRCs are checked for records that end
    after data byte ``crc_from`` (0: all; ``end``: none but the records found by
    resynchronising); every record's magic, lengths and own offset are checked in any case
    (``light_until``, the range recovery trusts as flushed, is accepted for that reason and
    changes nothing). Damage before ``resync_until`` is passed over; damage at or after it
    ends the walk (a torn tail: ``stopped`` says why). A blank record ends the walk too
    (``closed``). ``position`` is where the walk ended; ``zeros_from``: data bytes from there to
    ``end`` are zero (set by the last look-ahead: meaningful when the walk ended in damage).
    """

    def __init__(self, seg: MappedSegment, start: int, end: int, *, crc_from: int = 0,
                 resync_until: int | None = None, light_until: int = 0,
                 rows: int = WALK_ROWS, run_bytes: int | None = None) -> None:
        self.seg = seg
        self.start = start
        self.end = min(end, seg.data_size)
        self.crc_from = crc_from
        self.resync_until = self.end if resync_until is None else resync_until
        self.rows = rows
        self.run_bytes = run_bytes
        self.position = start
        self.damage: list[Damage] = []
        self.closed = False
        self.stopped: str | None = None
        self.zeros_from = self.end   # data bytes [zeros_from, end) are zero (see resync_span)

    def __iter__(self) -> Iterator[tuple[int, int, str | None]]:
        base = self.seg.base_offset
        for item in self.runs():
            if isinstance(item, Damage):
                yield item.offset - base, item.length, item.why
            else:
                yield from zip(item.positions.tolist(), item.sizes.tolist(), repeat(None))

    def runs(self) -> Iterator[Run | Damage]:
        seg, end = self.seg, self.end
        data = segment_map(seg)
        base = seg.base_offset
        pos = self.start
        crc_from = HEADER_AREA + self.crc_from
        fields = field_table("walk", self.rows)   # reused: fresh pages cost more
        walk = rk.kernels().walk
        budget = self.run_bytes
        rows = self.rows if budget is None else min(self.rows, WALK_ROWS)
        while pos < end:
            n, stop, why = walk(data, HEADER_AREA + pos, HEADER_AREA + end,
                                base - HEADER_AREA, crc_from, fields, 0, rows)
            if n:
                if budget is not None:   # the next run: about ``budget`` bytes of such records
                    rows = max(1, min(self.rows, budget * n // (stop - HEADER_AREA - pos)))
                yield Run(seg, data, fields[:, :n])
            pos = stop - HEADER_AREA
            if why == rk.WALK_END:
                continue
            # the slow path: what is at pos, and where the next good record starts
            kind, size, problem = record_problem(seg, pos, end, verify_crc=True)
            if problem is None and kind == rec.RecordKind.BLANK:
                self.closed = True
                pos += size
                break
            if problem is None:   # whole and intact, yet its topic is no name (not ASCII)
                problem = _decode_problem(seg, pos)
                nxt = pos + size
                self.zeros_from = self.end
            elif pos >= self.resync_until:
                self.stopped = problem
                break
            else:
                nxt, self.zeros_from = resync_span(seg, pos, end)
            d = Damage(base + pos, nxt - pos, problem)
            self.damage.append(d)
            yield d
            pos = nxt
        self.position = pos


def _decode_problem(seg: MappedSegment, pos: int) -> str:
    try:
        rec.decode_record(seg.mm, HEADER_AREA + pos)
    except CorruptRecordError as exc:
        return str(exc)
    return "the record cannot be read"   # pragma: no cover - the kernel and check_record agree


def walk_runs(segments: SegmentQueue, from_offset: int, limit: int, *, verify_crc: bool,
              rows: int = WALK_ROWS, run_bytes: int | None = None) -> Iterator[Run | Damage]:
    """``RecordWalk.runs`` over the log's committed records in ``[from_offset, limit)``,
    segment after segment: ``Run`` for good message records, ``Damage`` for damaged
    stretches. With ``verify_crc`` every record's CRC32C is checked, else lengths, magic and
    offsets only. Runs hold up to ``rows`` records, with ``run_bytes`` about that many bytes
    of records (up to ``rows``; the first run of a segment at most ``WALK_ROWS``)."""
    offset = max(from_offset, segments.min_offset())
    while offset < limit:
        seg = segments.find(offset)
        if seg is None:
            return
        end = min(seg.committed, limit - seg.base_offset)
        walk = RecordWalk(seg, offset - seg.base_offset, end,
                          crc_from=0 if verify_crc else end, rows=rows, run_bytes=run_bytes)
        try:
            yield from walk.runs()
        except ValueError:   # the segment was closed by retention meanwhile
            return
        if not walk.closed and walk.position < seg.data_size:
            return   # the limit lies inside this segment
        offset = seg.end_offset


def walk_log(segments: SegmentQueue, from_offset: int, limit: int, *,
             verify_crc: bool) -> Iterator[tuple[MappedSegment, int, int, str | None]]:
    """``walk_runs`` record by record: yields ``(segment, position, size, why)`` (``why``
    None for a good message record, else what failed where ``size`` damaged bytes start)."""
    for item in walk_runs(segments, from_offset, limit, verify_crc=verify_crc):
        if isinstance(item, Damage):
            seg = segments.find(item.offset)
            yield seg, item.offset - seg.base_offset, item.length, item.why
        else:
            seg = item.seg
            for pos, size in zip(item.positions.tolist(), item.sizes.tolist()):
                yield seg, pos, size, None


def record_start(seg: MappedSegment, pos: int) -> bool:
    """Whether data byte ``pos`` of ``seg`` is meant to start a record, even a damaged one:
    its magic or its own physical-offset field says so (the middle of a record says neither)."""
    p = HEADER_AREA + pos
    if pos < 0 or pos + rec.POS_PHYSICAL_OFFSET + 8 > seg.data_size:
        return False
    magic = rec.U32.unpack_from(seg.mm, p + rec.POS_MAGIC)[0]
    own = rec.I64_AT.unpack_from(seg.mm, p + rec.POS_PHYSICAL_OFFSET)[0]
    return magic in (rec.MESSAGE_MAGIC, rec.BLANK_MAGIC) or own == seg.base_offset + pos
