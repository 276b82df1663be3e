"""Check one commit-log segment record by record: what ``strata spark verify`` runs per segment
and ``rebuild-index`` walks before it trusts a segment.

Every record in ``[0, limit)`` must be whole (``strata.format.record.check_record``: magic,
lengths at both ends, field lengths, CRC32C) and carry its own physical offset. A sealed
segment's footer must agree with the walk: record count, data length, first/last store time and
the CRC32C of the data. The walk stops at the first bad record of a segment (records are found
by their lengths, so nothing after a damaged one can be located with certainty) and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from strata.errors import CorruptRecordError
from strata.files.segment import MappedSegment
from strata.format import record as rec
from strata.format.segment import FOOTER_BYTES, HEADER_AREA


@dataclass(frozen=True)
class Problem:
    """One thing a check found wrong.

    ``file`` is relative to the store directory; ``offset`` is in that file's own address
    space: the commit-log offset for commit-log segments, the queue offset for consume-queue
    files, the entry number for key-index files (-1 when a whole file is concerned).
    """

    file: str
    offset: int
    kind: str
    detail: str


def record_problem_kind(exc: CorruptRecordError) -> str:
    """``crc-mismatch`` for a checksum failure, ``bad-record`` for any structural one."""
    return "crc-mismatch" if str(exc).startswith("CRC32C mismatch") else "bad-record"


@dataclass
class SegmentWalk:
    """Walks the message records of ``seg`` in data bytes ``[0, limit)``; problems collect in
    ``problems``. Iterate it to get ``(position, size)`` of each whole message record."""

    seg: MappedSegment
    limit: int
    file: str
    verify_crc: bool = True
    problems: list[Problem] = field(default_factory=list)
    records: int = 0
    checked_bytes: int = 0
    min_store_timestamp: int = 0
    max_store_timestamp: int = 0
    complete: bool = False       # reached ``limit`` (or a closing blank record) without a problem
    closed: bool = False         # ended with a blank record that reaches the segment's end

    def __iter__(self) -> Iterator[tuple[int, int]]:
        seg, limit = self.seg, self.limit
        base = seg.base_offset
        check = rec.check_record
        i64 = rec.I64_AT.unpack_from
        pos = 0
        mm = seg.mm
        with seg.view(0, seg.data_size) as mv:
            while pos < limit:
                try:
                    kind, size = check(mv, pos, limit, verify_crc=self.verify_crc)
                except CorruptRecordError as exc:
                    self._stopped(pos, record_problem_kind(exc), str(exc))
                    return
                if kind == rec.RecordKind.BLANK:
                    if pos + size != seg.data_size:
                        self._stopped(pos, "bad-record",
                                      f"blank record of {size} bytes ends at data byte "
                                      f"{pos + size}, not at the segment's end {seg.data_size}")
                        return
                    self.closed = True
                    pos += size
                    break
                p = HEADER_AREA + pos
                phys = i64(mm, p + rec.POS_PHYSICAL_OFFSET)[0]
                if phys != base + pos:
                    self._stopped(pos, "offset-mismatch",
                                  f"record claims commit-log offset {phys} (stale bytes from an "
                                  "earlier write?)")
                    return
                ts = i64(mm, p + rec.POS_STORE_TIMESTAMP)[0]
                if self.records == 0:
                    self.min_store_timestamp = ts
                self.max_store_timestamp = ts
                self.records += 1
                yield pos, size
                pos += size
        self.checked_bytes = pos
        self.complete = True

    def _stopped(self, pos: int, kind: str, detail: str) -> None:
        self.checked_bytes = pos
        rest = self.limit - pos
        self.problems.append(Problem(
            self.file, self.seg.base_offset + pos, kind,
            f"{detail} (file byte {HEADER_AREA + pos}; the remaining {rest} bytes of the "
            "segment were not checked)"))

    def check_footer(self) -> None:
        """After iterating: compare a sealed segment's footer with what the walk found."""
        seg = self.seg
        end = HEADER_AREA + seg.data_size
        footer = seg.footer
        if footer is None:
            if any(seg.mm[end:end + FOOTER_BYTES]):
                self.problems.append(Problem(self.file, seg.end_offset, "footer-damaged",
                                             "footer bytes are present but fail their "
                                             "magic or checksum"))
            return
        where = seg.end_offset
        if footer.data_length != seg.data_size:
            self.problems.append(Problem(self.file, where, "footer-mismatch",
                                         f"sealed footer says {footer.data_length} data bytes; "
                                         f"a sealed segment holds {seg.data_size}"))
        elif seg.data_crc(footer.data_length) != footer.data_crc:
            self.problems.append(Problem(self.file, where, "footer-crc",
                                         "CRC32C of the segment's data does not match its "
                                         "footer (some byte changed after sealing)"))
        if not self.complete:
            return                      # counts below would only repeat the record problem
        found = (self.records, self.min_store_timestamp, self.max_store_timestamp)
        said = (footer.record_count, footer.min_store_timestamp, footer.max_store_timestamp)
        if found != said:
            self.problems.append(Problem(
                self.file, where, "footer-mismatch",
                f"footer says {said[0]} records stored {said[1]}..{said[2]}; the segment holds "
                f"{found[0]} records stored {found[1]}..{found[2]}"))
        if not self.closed:
            self.problems.append(Problem(self.file, where, "footer-mismatch",
                                         "segment is sealed but its records do not end with a "
                                         "blank record at the segment's end"))
