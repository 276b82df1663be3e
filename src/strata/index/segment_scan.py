"""Walk one commit-log segment, checking every record, as dispatch batches: what ``verify`` and
``rebuild-index`` run per segment.

The records are checked by the compiled record reader (``strata.log.record_fields.walk_fields``:
magic, lengths at both ends, field lengths, physical offset and — unless ``verify_crc=False`` —
CRC32C) and made into batches by the dispatch pipeline's own ``DispatchBatch.from_fields``, so a
scan and the reput service cannot disagree about a record's fields. The scan names the first
record that fails (``why_not_read`` says exactly what is wrong with it) and goes on at the next
good record, found by ``strata.log.record_walk.resync`` (a record of that very offset with a
good CRC), so every damaged record of a segment is listed.
"""

from __future__ import annotations

from typing import Iterator

from strata.files.segment import MappedSegment
from strata.format.record_table import WALK_BAD, WALK_BLANK
from strata.index.dispatch_batch import PARSE_ERRORS, EMPTY, DispatchBatch, TopicNames
from strata.log.record_fields import file_byte, walk_fields, why_not_read
from strata.log.record_walk import record_problem, resync
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
        seg = self.seg
        base = seg.base_offset
        names = TopicNames()
        pos = 0
        while pos < self.limit:
            run = walk_fields(seg, pos, self.limit, max_records, verify_crc=self.verify_crc)
            # a record whose topic or properties cannot even be parsed ends the batch there
            batch = DispatchBatch.from_fields(run, names) if len(run) else EMPTY
            if len(batch):
                self._count(batch)
                pos = batch.end - base
                yield batch
            if len(batch) < len(run) or run.why == WALK_BAD:
                nxt = resync(seg, pos, self.limit)   # a damaged record: name it, go on
                self._stopped(pos, nxt)
                if nxt >= self.limit:
                    return
                pos = nxt
                continue
            if run.why == WALK_BLANK:
                self._blank(pos)
                return
        self.checked_bytes = pos
        self.complete = not self.problems

    def _count(self, batch: DispatchBatch) -> None:
        ts = batch.store_timestamps
        if self.records == 0:
            self.min_store_timestamp = int(ts[0])
        self.max_store_timestamp = int(ts[-1])
        self.records += len(batch)

    def _blank(self, rel: int) -> None:
        """A blank record at data byte ``rel`` (the walk saw its magic) must close the segment:
        ``record_problem`` names it otherwise (torn, or not reaching the segment's end)."""
        _kind, _size, why = record_problem(self.seg, rel, self.limit, verify_crc=False)
        if why is not None:
            self._problem(rel, record_problem_kind(why), why)
            return
        self.closed = True
        self.checked_bytes = self.seg.data_size
        self.complete = True

    def _stopped(self, rel: int, nxt: int) -> None:
        """Say exactly why the record at data byte ``rel`` was not accepted (the scan goes on
        at data byte ``nxt``, the next good record)."""
        kind, why = why_not_read(self.seg, rel, self.limit, verify_crc=self.verify_crc,
                                 parse_errors=PARSE_ERRORS)
        self._problem(rel, kind, why, nxt)

    def _problem(self, rel: int, kind: str, detail: str, nxt: int | None = None) -> None:
        self.checked_bytes = rel
        if nxt is None or nxt >= self.limit:
            rest = f"the remaining {self.limit - rel} bytes of the segment were not checked"
        else:
            rest = (f"the next {nxt - rel} bytes hold no good record and were passed over; the "
                    f"scan went on at offset {self.seg.base_offset + nxt}")
        self.problems.append(Problem(self.file, self.seg.base_offset + rel, kind,
                                     f"{detail} (file byte {file_byte(rel)}; {rest})"))

    def check_footer(self) -> None:
        """After iterating: compare a sealed segment's footer with what the scan found."""
        self.problems += check_footer(self.seg, self.file, self.records,
                                      self.min_store_timestamp, self.max_store_timestamp,
                                      complete=self.complete, closed=self.closed)
