"""Walk one commit-log segment, checking every record, as dispatch batches: what ``verify`` and
``rebuild-index`` run per segment.

The records are read by the dispatch pipeline's own reader (``walk_records`` +
``read_segment_batch``: lengths at both ends, magic, field lengths and physical offset checked
for a whole run of headers at once), so a scan and the reput service cannot disagree about a
record's fields. On top, every record's CRC32C is checked (unless ``verify_crc=False``). The
scan names the first record that fails (``check_record`` says exactly what is wrong with it)
and goes on at the next good record, found by ``strata.log.record_walk.resync`` (a record of
that very offset with a good CRC), so every damaged record of a segment is listed.
"""

from __future__ import annotations

from typing import Iterator

from strata.errors import CorruptRecordError
from strata.files.segment import MappedSegment
from strata.format import record as rec
from strata.format.segment import HEADER_AREA
from strata.index.dispatch_batch import (PARSE_ERRORS, DispatchBatch, TopicNames, first_bad_crc,
                                         read_parseable, walk_records)
from strata.log.record_walk import resync
from strata.log.verify import Problem, check_footer, record_problem_kind


class SegmentScan:
    """Iterate ``batches()`` over the message records in data bytes ``[0, limit)`` of ``seg``;
    afterwards ``problems``, ``records``, ``checked_bytes`` and the store-time range say what
    was found, and ``check_footer()`` compares a sealed segment's footer with it."""

    def __init__(self, seg: MappedSegment, limit: int, file: str, *,
                 verify_crc: bool = True) -> None:
        self.seg, self.limit, self.file, self.verify_crc = seg, limit, file, verify_crc
        self.problems: list[Problem] = []
        self.records = 0
        self.checked_bytes = 0
        self.min_store_timestamp = 0
        self.max_store_timestamp = 0
        self.complete = False    # reached the limit (or a closing blank record) without a problem
        self.closed = False      # ended with a blank record that reaches the segment's end

    def batches(self, max_records: int = 65536) -> Iterator[DispatchBatch]:
        seg, mm = self.seg, self.seg.mm
        base = seg.base_offset
        end = HEADER_AREA + self.limit
        names = TopicNames()
        pos = HEADER_AREA
        while pos < end:
            positions, blank = walk_records(mm, pos, end, max_records)
            crc_stop = False
            if positions and self.verify_crc:   # before anything parses a damaged record
                bad = first_bad_crc(self.seg, positions)
                if bad is not None:
                    positions, crc_stop = positions[:bad], True
            batch = self._read(positions, end, names)
            n = len(batch) if batch is not None else 0
            if n:
                self._count(batch)
                pos = HEADER_AREA + batch.end - base
                yield batch
            if n < len(positions) or crc_stop or (not positions and not blank):
                rel = pos - HEADER_AREA   # a damaged record: name it, go on at the next good one
                nxt = resync(seg, rel, self.limit)
                self._stopped(rel, nxt)
                if nxt >= self.limit:
                    return
                pos = HEADER_AREA + nxt
                continue
            if not positions and blank:
                self._blank(pos - HEADER_AREA)
                return
        self.checked_bytes = pos - HEADER_AREA
        self.complete = not self.problems

    def _read(self, positions: list[int], end: int, names: TopicNames) -> DispatchBatch | None:
        """The dispatch reader over ``positions``; it stops before the first record it rejects.
        A record whose properties cannot even be parsed ends the batch there too."""
        if not positions:
            return None
        batch = read_parseable(self.seg, positions, end, names)
        return batch if len(batch) else None

    def _count(self, batch: DispatchBatch) -> None:
        ts = batch.store_timestamps
        if self.records == 0:
            self.min_store_timestamp = int(ts[0])
        self.max_store_timestamp = int(ts[-1])
        self.records += len(batch)

    def _blank(self, rel: int) -> None:
        """A blank record at data byte ``rel`` must close the segment."""
        seg = self.seg
        try:
            with seg.view(0, seg.data_size) as mv:
                kind, size = rec.check_record(mv, rel, self.limit)
        except CorruptRecordError as exc:
            self._problem(rel, record_problem_kind(exc), str(exc))
            return
        if kind != rec.RecordKind.BLANK or rel + size != seg.data_size:
            self._problem(rel, "bad-record", f"blank record of {size} bytes ends at data byte "
                          f"{rel + size}, not at the segment's end {seg.data_size}")
            return
        self.closed = True
        self.checked_bytes = seg.data_size
        self.complete = True

    def _stopped(self, rel: int, nxt: int) -> None:
        """Say exactly why the record at data byte ``rel`` was not accepted (the scan goes on
        at data byte ``nxt``, the next good record)."""
        seg = self.seg
        p = HEADER_AREA + rel
        try:
            with seg.view(0, seg.data_size) as mv:
                rec.check_record(mv, rel, self.limit, verify_crc=self.verify_crc)
        except CorruptRecordError as exc:
            self._problem(rel, record_problem_kind(exc), str(exc), nxt)
            return
        phys = rec.I64_AT.unpack_from(seg.mm, p + rec.POS_PHYSICAL_OFFSET)[0]
        if phys != seg.base_offset + rel:
            self._problem(rel, "offset-mismatch", f"record claims commit-log offset {phys} "
                          "(stale bytes from an earlier write?)", nxt)
            return
        start, length = rec.properties_span(seg.mm, p)
        try:
            rec.decode_properties(seg.mm[start:start + length])
            why = "the dispatch reader rejects it"
        except PARSE_ERRORS as exc:
            why = f"its properties section cannot be read ({exc})"
        self._problem(rel, "bad-record", why, nxt)

    def _problem(self, rel: int, kind: str, detail: str, nxt: int | None = None) -> None:
        self.checked_bytes = rel
        if nxt is None or nxt >= self.limit:
            rest = f"the remaining {self.limit - rel} bytes of the segment were not checked"
        else:
            rest = (f"the next {nxt - rel} bytes hold no good record and were passed over; the "
                    f"scan went on at offset {self.seg.base_offset + nxt}")
        self.problems.append(Problem(self.file, self.seg.base_offset + rel, kind,
                                     f"{detail} (file byte {HEADER_AREA + rel}; {rest})"))

    def check_footer(self) -> None:
        """After iterating: compare a sealed segment's footer with what the scan found."""
        self.problems += check_footer(self.seg, self.file, self.records,
                                      self.min_store_timestamp, self.max_store_timestamp,
                                      complete=self.complete, closed=self.closed)
