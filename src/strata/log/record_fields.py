"""Field tables of checked commit-log records for the readers above log/: the dispatch
pipeline, ``verify``'s segment scan and the consume-queue unit checks.

The records are checked by the one compiled reader (``record_kernels``: ``check_at`` at known
offsets, ``walk`` from an offset) and handed out as its int64 field table (rows
``record_table.F_*``) together with the byte array its ``F_*_AT`` positions index, so a caller
slices topics and properties there without knowing the segment file's layout. What to do at a
record that fails (wait for it, or pass over the damage to the next good record) is decided
here too (``past_damage``, ``record_problem``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strata.errors import CorruptRecordError
from strata.files.segment import MappedSegment
from strata.format import record as rec
from strata.format import record_table as rk
from strata.format.segment import HEADER_AREA
from strata.log.batch_reader import offset_runs
from strata.log.record_walk import Run, record_problem, resync, scratch, segment_map
from strata.log.verify import record_problem_kind


@dataclass
class FieldRun(Run):
    """A ``record_walk.Run`` of good message records (fields ``fields[F_*, i]``, positions in
    ``data``) and ``why`` reading stopped after them (``WALK_END``: the end or ``rows``
    reached, ``WALK_BLANK``: a blank record's magic next, ``WALK_BAD``: no good record next).
    ``fields`` is this thread's scratch table: valid until it reads again."""

    why: int

    def slices(self, starts: list[int], ends: list[int]) -> list[bytes]:
        """``bytes`` of ``data[starts[i]:ends[i]]`` for each i (topics, properties sections),
        each sliced from the segment's map in one step (no array or memoryview slice)."""
        raw = self.seg.mm
        return [raw[a:b] for a, b in zip(starts, ends)]


def walk_fields(seg: MappedSegment, pos: int, end: int, rows: int, *,
                verify_crc: bool) -> FieldRun:
    """Up to ``rows`` good records of ``seg`` from data byte ``pos`` (a record start) below
    data byte ``end``, CRC32C checked with ``verify_crc``."""
    data = segment_map(seg)
    fields = scratch("field_run", (rk.FIELDS, rows), np.int64)
    end = min(end, seg.data_size)
    n, _stop, why = rk.kernels().walk(data, HEADER_AREA + pos, HEADER_AREA + end,
                                     seg.base_offset - HEADER_AREA,
                                     HEADER_AREA if verify_crc else HEADER_AREA + end,
                                     fields, 0, rows)
    return FieldRun(seg, data, fields[:, :n], why)


_NO_TOPIC = np.zeros(0, np.uint8)
_NO_QUEUE_OFFSETS = np.zeros(0, np.int64)


def fields_at(seg: MappedSegment, offsets: np.ndarray, end: int, *,
              verify_crc: bool) -> FieldRun:
    """The records at commit-log ``offsets`` (ascending, all in ``seg``) below data byte
    ``end``, up to the first that is not a good message record of its offset (``why``
    WALK_BAD then)."""
    offsets = np.asarray(offsets, np.int64)
    n = len(offsets)
    data = segment_map(seg)
    fields = scratch("field_at", (rk.FIELDS, n), np.int64)
    status = scratch("status_at", (n,), np.uint8)
    good, _ = rk.kernels().check_at(data, offsets - (seg.base_offset - HEADER_AREA), offsets,
                                    HEADER_AREA + end, verify_crc, _NO_TOPIC, -1,
                                    _NO_QUEUE_OFFSETS, fields, status)
    if good < n:   # (the usual batch is all good: no search for the first bad one)
        good = int(np.argmax(status != rk.GOOD))
    return FieldRun(seg, data, fields[:, :good], rk.WALK_BAD if good < n else rk.WALK_END)


def load_reader() -> None:
    """Load the compiled record reader now: numba and its cached code cost a process about
    0.4 s on first use. The dispatch thread calls this as it starts, so that cost falls at
    open rather than in the middle of the first puts (the first batch it dispatches)."""
    kernels = rk.kernels()
    data = np.zeros(64, np.uint8)
    fields = np.zeros((rk.FIELDS, 1), np.int64)
    none = np.zeros(1, np.int64)
    kernels.walk(data, 0, 64, 0, 64, fields, 0, 1)
    kernels.check_at(data, none, none, 64, False, _NO_TOPIC, -1, _NO_QUEUE_OFFSETS, fields,
                     np.zeros(1, np.uint8))


def check_offsets(segments: list[MappedSegment], offsets: np.ndarray, limit: int,
                  topic: bytes, queue_id: int,
                  queue_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the records at commit-log ``offsets`` (ascending) below offset ``limit``, without
    CRC: ``(status, sizes)`` — ``status[i]`` GOOD when a whole message record of that offset
    is there and is message ``queue_offsets[i]`` of ``topic``/``queue_id``, OTHER when it is
    another message, NO_RECORD when there is none (or no segment holds it); ``sizes[i]`` its
    length (GOOD and OTHER)."""
    offsets = np.asarray(offsets, np.int64)
    queue_offsets = np.asarray(queue_offsets, np.int64)
    n = len(offsets)
    status = np.full(n, rk.NO_RECORD, np.uint8)
    sizes = np.zeros(n, np.int64)
    name = np.frombuffer(topic, np.uint8)
    check_at = rk.kernels().check_at
    for lo, hi, seg in offset_runs(segments, offsets):
        if seg is None or seg.closed:
            continue
        end = HEADER_AREA + max(0, min(seg.data_size, limit - seg.base_offset))
        fields = scratch("units", (rk.FIELDS, hi - lo), np.int64)
        try:   # numpy views of the mapping pin it while they live
            check_at(segment_map(seg), offsets[lo:hi] - (seg.base_offset - HEADER_AREA),
                     offsets[lo:hi], end, False, name, queue_id, queue_offsets[lo:hi], fields,
                     status[lo:hi])
        except (ValueError, TypeError, IndexError):   # unmapped by retention just now
            status[lo:hi] = rk.NO_RECORD
            continue
        sizes[lo:hi] = fields[rk.F_TOTAL]
    return status, sizes


def past_damage(seg: MappedSegment, pos: int, end: int) -> int | None:
    """Where a reader goes on when no record can be read at data byte ``pos`` of ``seg``
    (bytes below data byte ``end`` confirmed): None to wait (nothing confirmed there yet, or
    a whole record that is not confirmed yet), else the data byte of the next good record
    (``resync``), passing over the damaged one."""
    if pos >= end:
        return None
    _kind, size, why = record_problem(seg, pos, seg.committed, verify_crc=False)
    if why is None and pos + size > end:
        return None
    return resync(seg, pos, end)


def why_not_read(seg: MappedSegment, pos: int, limit: int, *, verify_crc: bool,
                 parse_errors: tuple[type[BaseException], ...]) -> tuple[str, str]:
    """(problem kind, detail): exactly why the record at data byte ``pos`` of ``seg`` (below
    ``limit``) cannot be read: what ``check_record`` rejects, a stale physical offset, or a
    properties section that does not parse (any of ``parse_errors``)."""
    try:
        with seg.view(0, seg.data_size) as mv:
            rec.check_record(mv, pos, limit, verify_crc=verify_crc)
    except CorruptRecordError as exc:
        return record_problem_kind(exc), str(exc)
    mm = seg.mm
    p = HEADER_AREA + pos
    phys = rec.I64_AT.unpack_from(mm, p + rec.POS_PHYSICAL_OFFSET)[0]
    if phys != seg.base_offset + pos:
        return "offset-mismatch", (f"record claims commit-log offset {phys} (stale bytes from "
                                   "an earlier write?)")
    start, length = rec.properties_span(mm, p)
    try:
        rec.decode_properties(mm[start:start + length])
        return "bad-record", "the dispatch reader rejects it"
    except parse_errors as exc:
        return "bad-record", f"its properties section cannot be read ({exc})"


def file_byte(pos: int) -> int:
    """The byte of a segment file where data byte ``pos`` lies."""
    return HEADER_AREA + pos
