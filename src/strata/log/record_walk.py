"""Walk one commit-log segment record by record and get past damage: the record walker that
recovery, ``strata verify`` and ``store.scan()`` share.

A message record is good when its magic, its length at both ends, its field lengths and its
physical-offset field (== segment base + position) agree, and its CRC32C where the walk checks
CRCs. At a bad record the walker resynchronises: the next position whose bytes are a good
record of that very offset with a matching CRC (found by searching for the magic), or a good
blank record that reaches the segment's end. Everything in between is one ``Damage``. A stretch
with no good record after it runs to the end of the walk.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

from strata.errors import CorruptRecordError
from strata.files.segment import MappedSegment
from strata.files.segment_queue import SegmentQueue
from strata.format import record as rec
from strata.format.segment import HEADER_AREA

_MESSAGE = rec.U32.pack(rec.MESSAGE_MAGIC)
_BLANK = rec.U32.pack(rec.BLANK_MAGIC)
_LENGTH_MAGIC = struct.Struct("<II")
_MIN_RECORD = rec.HEADER_SIZE + 12 + rec.TRAILER_SIZE   # a record's fixed part, hosts, trailer


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


def resync(seg: MappedSegment, pos: int, end: int) -> int:
    """The first data byte after ``pos`` (and below ``end``) where a good record starts (CRC
    checked: a message record of that very offset, or a blank record reaching the segment's
    end); ``end`` if there is none."""
    mm = seg.mm
    lo, hi = HEADER_AREA + pos + 1, HEADER_AREA + end
    found = {_MESSAGE: -1, _BLANK: -1}   # next hit of each magic at or after lo (-1: search)
    while True:
        for magic in (_MESSAGE, _BLANK):
            if found[magic] != -2 and found[magic] < lo + 4:
                hit = mm.find(magic, lo + 4, hi)
                found[magic] = hit if hit >= 0 else -2   # -2: none left
        hits = [h for h in found.values() if h >= 0]
        if not hits:
            return end
        q = min(hits) - 4 - HEADER_AREA    # the magic sits 4 bytes into a record
        kind, _size, why = record_problem(seg, q, end, verify_crc=True)
        if why is None:
            return q
        lo = HEADER_AREA + q + 1


class RecordWalk:
    """The records of ``seg`` in data bytes ``[start, end)`` (``start`` a record start).

    Iterating yields ``(position, size, None)`` for each good message record and
    ``(position, length, why)`` for each damaged stretch (``damage`` lists them as ``Damage``).
    CRCs are checked for records that end after data byte ``crc_from`` (0: all; ``end``:
    none but the records found by resynchronising). Records that end by ``light_until`` are
    checked for magic, lengths at both ends and own offset only (what recovery trusts as
    flushed: the quickest walk that still finds every record). Damage before ``resync_until``
    is passed over; damage at or after it ends the walk (a torn tail: ``stopped`` says why).
    A blank record ends the walk too (``closed``). ``position`` is where the walk ended.
    """

    def __init__(self, seg: MappedSegment, start: int, end: int, *, crc_from: int = 0,
                 resync_until: int | None = None, light_until: int = 0) -> None:
        self.seg = seg
        self.start = start
        self.end = min(end, seg.data_size)
        self.crc_from = crc_from
        self.resync_until = self.end if resync_until is None else resync_until
        self.light_until = light_until
        self.position = start
        self.damage: list[Damage] = []
        self.closed = False
        self.stopped: str | None = None

    def __iter__(self) -> Iterator[tuple[int, int, str | None]]:
        seg, end, crc_from = self.seg, self.end, self.crc_from
        mm = seg.mm
        check = rec.check_record
        phys_at = rec.I64_AT.unpack_from
        base = seg.base_offset
        pos = self.start
        light = min(self.light_until, end)
        head = _LENGTH_MAGIC.unpack_from
        u32 = rec.U32.unpack_from
        magic_ok, smallest = rec.MESSAGE_MAGIC, _MIN_RECORD
        while pos < end:
            p = HEADER_AREA + pos
            if pos < light:   # the lightest path: magic, lengths at both ends, own offset
                total, magic = head(mm, p)
                if magic == magic_ok and total >= smallest and pos + total <= light and \
                        u32(mm, p + total - 4)[0] == total and \
                        phys_at(mm, p + rec.POS_PHYSICAL_OFFSET)[0] == base + pos:
                    yield pos, total, None
                    pos += total
                    continue
            crc = pos >= crc_from
            try:   # the fast path: one good message record
                kind, size = check(mm, p, HEADER_AREA + end, verify_crc=crc)
                if kind == rec.RecordKind.MESSAGE and phys_at(
                        mm, p + rec.POS_PHYSICAL_OFFSET)[0] == base + pos and (
                        crc or pos + size <= crc_from or check(mm, p, HEADER_AREA + end)):
                    yield pos, size, None
                    pos += size
                    continue
            except CorruptRecordError:
                pass
            kind, size, why = record_problem(seg, pos, end, verify_crc=True)
            if why is None:   # a blank record closing the segment
                self.closed = True
                pos += size
                break
            if pos >= self.resync_until:
                self.stopped = why
                break
            nxt = resync(seg, pos, end)
            self.damage.append(Damage(base + pos, nxt - pos, why))
            yield pos, nxt - pos, why
            pos = nxt
        self.position = pos


def walk_log(segments: SegmentQueue, from_offset: int, limit: int, *,
             verify_crc: bool) -> Iterator[tuple[MappedSegment, int, int, str | None]]:
    """``RecordWalk`` over the log's committed records in ``[from_offset, limit)``, segment
    after segment: yields ``(segment, position, size, why)`` (``why`` None for a good message
    record, else what failed where ``size`` damaged bytes start). With ``verify_crc`` every
    record's CRC32C is checked, else lengths, magic and offsets only."""
    offset = max(from_offset, segments.min_offset())
    while offset < limit:
        seg = segments.find(offset)
        if seg is None:
            return
        end = min(seg.committed, limit - seg.base_offset)
        walk = RecordWalk(seg, offset - seg.base_offset, end, crc_from=0 if verify_crc else end)
        try:
            for pos, size, why in walk:
                yield seg, pos, size, why
        except ValueError:   # the segment was closed by retention meanwhile
            return
        if not walk.closed and walk.position < seg.data_size:
            return   # the limit lies inside this segment
        offset = seg.end_offset


def record_start(seg: MappedSegment, pos: int) -> bool:
    """Whether data byte ``pos`` of ``seg`` is meant to start a record, even a damaged one:
    its magic or its own physical-offset field says so (the middle of a record says neither)."""
    p = HEADER_AREA + pos
    if pos < 0 or pos + rec.POS_PHYSICAL_OFFSET + 8 > seg.data_size:
        return False
    magic = rec.U32.unpack_from(seg.mm, p + rec.POS_MAGIC)[0]
    own = rec.I64_AT.unpack_from(seg.mm, p + rec.POS_PHYSICAL_OFFSET)[0]
    return magic in (rec.MESSAGE_MAGIC, rec.BLANK_MAGIC) or own == seg.base_offset + pos
