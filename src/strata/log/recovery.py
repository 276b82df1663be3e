"""Commit-log recovery: find where the log really ends and make the files agree.

Clean stop (no abort marker, checkpoint carries the exact end): nothing is rescanned; the last
record is checked through its trailer. Unclean stop: sealed segments whose footer is valid are
trusted; from the first unsealed segment on, every record is verified (magic, lengths at both
ends, physical offset, CRC32C); the log ends before the first bad one. Bytes after the end are
zeroed (so a later crash cannot resurrect them) and segment files wholly beyond it are deleted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from strata.errors import CorruptRecordError
from strata.files.segment import MappedSegment
from strata.format import record as rec
from strata.format.checkpoint import Checkpoint
from strata.log.commit_log import CommitLog

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    """What opening the store found and did. ``store.recovery_report`` holds one."""

    clean: bool
    end_offset: int = 0
    verified_from: int = 0
    records_verified: int = 0
    trusted_segments: int = 0
    scanned_segments: int = 0
    truncated_at: int | None = None
    problem: str | None = None
    zeroed_bytes: int = 0
    dropped_segments: list[str] = field(default_factory=list)
    seconds: float = 0.0
    redispatched_records: int = 0          # replayed into consume queues and key index
    consume_queue_units_dropped: int = 0   # units past the replay point, rebuilt by replay
    repaired_files: list[str] = field(default_factory=list)  # damaged files rebuilt, and how

    @property
    def lost_anything(self) -> bool:
        return bool(self.truncated_at is not None and (self.zeroed_bytes or self.dropped_segments))

    def summary(self) -> str:
        kind = "clean" if self.clean else "unclean"
        s = (f"{kind} recovery: log ends at offset {self.end_offset}; "
             f"{self.trusted_segments} sealed segment(s) trusted, {self.scanned_segments} "
             f"scanned ({self.records_verified} records verified from offset "
             f"{self.verified_from}) in {self.seconds:.3f}s")
        if self.truncated_at is not None and self.problem:
            s += (f"; truncated at offset {self.truncated_at} ({self.problem}); "
                  f"{self.zeroed_bytes} bytes discarded")
        if self.dropped_segments:
            s += f"; dropped segment files {', '.join(self.dropped_segments)}"
        for repair in self.repaired_files:
            s += f"; {repair}"
        return s


def _trusted(seg: MappedSegment) -> bool:
    f = seg.footer
    return f is not None and f.data_length == seg.data_size


def _adopt_footer(seg: MappedSegment) -> None:
    f = seg.footer
    seg.set_positions(seg.data_size)
    seg.record_count = f.record_count
    seg.min_store_timestamp = f.min_store_timestamp
    seg.max_store_timestamp = f.max_store_timestamp


def recover(clog: CommitLog, checkpoint: Checkpoint | None, clean: bool, *,
            modify: bool = True) -> RecoveryReport:
    """Set every segment's positions to the recovered end; with ``modify`` repair the files."""
    t0 = time.perf_counter()
    report = None
    if clean and checkpoint is not None and checkpoint.clean_end_offset >= 0:
        report = _recover_clean(clog, checkpoint)
    if report is None:
        report = _recover_unclean(clog, modify=modify)
        report.clean = False
    report.seconds = time.perf_counter() - t0
    segs = clog.segments.segments
    if segs:
        last = segs[-1]
        clog.last_store_timestamp = max(last.max_store_timestamp,
                                        segs[-2].max_store_timestamp if len(segs) > 1 else 0)
    if report.truncated_at is not None:
        log.warning("%s", report.summary())
    else:
        log.info("%s", report.summary())
    return report


def _recover_clean(clog: CommitLog, cp: Checkpoint) -> RecoveryReport | None:
    segs = clog.segments.segments
    end = cp.clean_end_offset
    if not segs:
        return RecoveryReport(clean=True, end_offset=0) if end == 0 else None
    if end < segs[0].base_offset or end > segs[-1].end_offset:
        return None
    report = RecoveryReport(clean=True, end_offset=end, verified_from=end)
    for seg in segs:
        if seg.end_offset <= end:
            if not _trusted(seg):
                return None  # a full segment without its footer: verify it the slow way
            _adopt_footer(seg)
            report.trusted_segments += 1
        elif seg.base_offset <= end:
            seg.set_positions(end - seg.base_offset)
            seg.record_count = cp.active_record_count
            seg.min_store_timestamp = cp.active_min_timestamp
            seg.max_store_timestamp = cp.active_max_timestamp
        else:
            return None  # data past the recorded end: do not trust the checkpoint
    # Check the last record through its trailer.
    last = clog.segments.find(end - 1) if end > segs[0].base_offset else None
    if last is not None and last.committed > 0:
        pos = end - last.base_offset
        with last.view(0, last.data_size) as mv:
            (size,) = rec.U32.unpack_from(mv, pos - rec.TRAILER_SIZE)
            start = pos - size
            try:
                if start < 0:
                    raise CorruptRecordError("trailer points before the segment", end)
                kind, _ = rec.check_record(mv, start, pos, verify_crc=True)
                if kind == rec.RecordKind.MESSAGE and rec.I64_AT.unpack_from(
                        mv, start + rec.POS_PHYSICAL_OFFSET)[0] != last.base_offset + start:
                    raise CorruptRecordError("physical offset mismatch", end)
            except CorruptRecordError:
                return None
    return report


def _recover_unclean(clog: CommitLog, *, modify: bool) -> RecoveryReport:
    segs = clog.segments.segments
    report = RecoveryReport(clean=False)
    i = 0
    while i < len(segs) and _trusted(segs[i]):
        _adopt_footer(segs[i])
        i += 1
    report.trusted_segments = i
    if i == len(segs):
        report.end_offset = segs[-1].end_offset if segs else 0
        report.verified_from = report.end_offset
        return report
    end = segs[i].base_offset
    report.verified_from = end
    problem = None
    for seg in segs[i:]:
        report.scanned_segments += 1
        pos, count, tmin, tmax = 0, 0, 0, 0
        complete = False
        with seg.view(0, seg.data_size) as mv:
            while pos < seg.data_size:
                try:
                    kind, size = rec.check_record(mv, pos, seg.data_size, verify_crc=True)
                    if kind == rec.RecordKind.BLANK:
                        if pos + size != seg.data_size:
                            raise CorruptRecordError("blank record does not reach the segment end")
                        complete = True
                        break
                    phys = rec.I64_AT.unpack_from(mv, pos + rec.POS_PHYSICAL_OFFSET)[0]
                    if phys != seg.base_offset + pos:
                        raise CorruptRecordError(
                            f"record claims offset {phys} (stale bytes from an earlier write)")
                    ts = rec.I64_AT.unpack_from(mv, pos + rec.POS_STORE_TIMESTAMP)[0]
                except CorruptRecordError as exc:
                    problem = str(exc)
                    break
                if count == 0:
                    tmin = ts
                tmax = ts
                count += 1
                pos += size
        report.records_verified += count
        seg.record_count, seg.min_store_timestamp, seg.max_store_timestamp = count, tmin, tmax
        if complete:
            seg.set_positions(seg.data_size)
            if not seg.sealed and modify:
                clog._to_seal.append(seg)
            end = seg.end_offset
            continue
        seg.set_positions(pos)
        end = seg.base_offset + pos
        break
    report.end_offset = end
    # Anything after `end` is not part of the log.
    tail = clog.segments.find(end)
    had_more = False
    if tail is not None:
        with tail.view(end - tail.base_offset, min(tail.data_size, end - tail.base_offset + 8)) as mv:
            had_more = any(mv)
    beyond = [s for s in segs if s.base_offset > end]
    if problem is not None and (had_more or beyond):
        report.truncated_at = end
        report.problem = problem
    if modify:
        if tail is not None:
            pos = end - tail.base_offset
            report.zeroed_bytes += tail.zero(pos, tail.data_size)
            if tail.sealed:
                tail.clear_footer()
        for s in beyond:
            report.dropped_segments.append(s.path.name)
        clog.segments.truncate(end)
        if report.dropped_segments and report.truncated_at is None:
            report.truncated_at = end
            report.problem = problem or "segment files beyond the end of the log"
    elif beyond:
        report.dropped_segments = [s.path.name for s in beyond]
    if report.truncated_at is None and report.zeroed_bytes:
        report.truncated_at = end
        report.problem = problem
    return report
