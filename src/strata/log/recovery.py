"""Commit-log recovery: find where the log really ends and make the files agree.

Clean stop (no abort marker, checkpoint carries the exact end): nothing is rescanned; the last
record is checked through its trailer. Unclean stop: sealed segments whose footer is valid are
trusted; from the first unsealed segment on, records are walked (``RecordWalk``: one compiled
pass per run of records). What the checkpoint says was flushed is trusted, as Kafka trusts its
recovery point: there records are checked for structure only (magic, lengths at both ends,
field lengths, physical offset; no CRC), and a
damaged one is corruption, passed over by resynchronising, reported and never served. From the
flushed offset on (the only part a crash can tear) every record is verified, CRC32C included,
and the log ends before the first bad one. Bytes after the end are zeroed (so a later crash
cannot resurrect them) and segment files wholly beyond it are deleted.

A segment file shorter than its header implies (its tail lost in a copy) was zero-extended when
it was opened (``MappedSegment.restored_from``). If it is the last, the log ends after its last
whole record. If it is not, the later segments are kept: the lost stretch is closed with a blank
record (so every reader moves on to the next segment) and reported in ``closed_gaps``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from strata.errors import CorruptRecordError
from strata.files.segment import MappedSegment
from strata.format import record as rec
from strata.format.checkpoint import Checkpoint
from strata.format.record_table import F_STORE_TS
from strata.format.segment import HEADER_AREA
from strata.log.commit_log import CommitLog
from strata.log.record_walk import Damage, RecordWalk

RECOVERY_ROWS = 1 << 14   # records per compiled walk call

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    """What opening the store found and did. ``store.recovery_report`` holds one."""

    clean: bool
    end_offset: int = 0
    verified_from: int = 0                 # records from here on were CRC-verified
    records_verified: int = 0              # records CRC-verified (past the flushed offset)
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
    new_store: bool = False                # nothing was there: a new store was created
    path: str = ""                         # the store directory
    flushed_offset: int = 0                # what the checkpoint said was flushed (unclean)
    records_walked: int = 0                # records walked after the trusted sealed segments
    corrupt_records: list[Damage] = field(default_factory=list)  # in the flushed range, kept out
    closed_gaps: list[Damage] = field(default_factory=list)  # lost stretches closed with a blank
    restored_segments: list[str] = field(default_factory=list)  # cut files, damaged headers

    @property
    def lost_anything(self) -> bool:
        """Records were cut, dropped, found damaged or lost with a cut file."""
        return bool(self.truncated_at is not None and (self.zeroed_bytes or self.dropped_segments)
                    or self.corrupt_records or self.closed_gaps)

    def summary(self) -> str:
        if self.new_store:
            return f"created a new store at {self.path}"
        kind = "clean" if self.clean else "unclean"
        s = (f"{kind} recovery: log ends at offset {self.end_offset}; "
             f"{self.trusted_segments} sealed segment(s) trusted, {self.scanned_segments} "
             f"scanned ({self.records_walked} records walked, {self.records_verified} of them "
             f"CRC-verified from offset {self.verified_from}, where the checkpoint's flushed "
             f"range ends) in {self.seconds:.3f}s")
        if self.truncated_at is not None and self.problem:
            s += (f"; truncated at offset {self.truncated_at} ({self.problem}); "
                  f"{self.zeroed_bytes} bytes discarded")
        if self.dropped_segments:
            s += f"; dropped segment files {', '.join(self.dropped_segments)}"
        for restored in self.restored_segments:
            s += f"; {restored}"
        if self.closed_gaps:
            s += ("; lost stretches closed with a blank record, later segments kept: "
                  + ", ".join(f"[{g.offset}, {g.end})" for g in self.closed_gaps))
        if self.corrupt_records:
            shown = ", ".join(str(d) for d in self.corrupt_records[:5])
            more = len(self.corrupt_records) - 5
            s += (f"; {len(self.corrupt_records)} damaged record(s) in the flushed range kept "
                  f"out of the log, every good record around them kept: {shown}"
                  + (f" and {more} more" if more > 0 else ""))
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
    segs = clog.segments.segments
    restored = [f"segment file {s.path.name} was {s.restored_from} bytes, its header implies "
                f"{s.file_size}: zero-extended, the bytes after the cut are lost"
                for s in segs if s.restored_from is not None]
    restored += [f"segment file {s.path.name}: damaged header ({s.repaired_header}) rewritten "
                 f"from its name and the segment size" for s in segs if s.repaired_header]
    if not segs and checkpoint is None:
        report = RecoveryReport(clean=True, new_store=True)
    elif clean and checkpoint is not None and checkpoint.clean_end_offset >= 0 and not restored:
        report = _recover_clean(clog, checkpoint)
    if report is None:
        report = _recover_unclean(clog, checkpoint, modify=modify)
        report.clean = False
    report.path = str(clog.directory.parent)
    report.restored_segments = restored
    report.seconds = time.perf_counter() - t0
    segs = clog.segments.segments
    if segs:
        last = segs[-1]
        clog.last_store_timestamp = max(last.max_store_timestamp,
                                        segs[-2].max_store_timestamp if len(segs) > 1 else 0)
    if report.truncated_at is not None or report.corrupt_records or restored:
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


def _recover_unclean(clog: CommitLog, checkpoint: Checkpoint | None, *,
                     modify: bool) -> RecoveryReport:
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
    flushed = checkpoint.flushed_offset if checkpoint is not None else 0
    report.flushed_offset = flushed
    end = segs[i].base_offset
    report.verified_from = max(end, min(flushed, segs[-1].end_offset))
    problem = None
    for k in range(i, len(segs)):
        seg = segs[k]
        last = k == len(segs) - 1
        report.scanned_segments += 1
        trust = max(0, min(flushed - seg.base_offset, seg.data_size))
        # Damage in the flushed range is corruption, passed over; past it, a torn tail. A cut
        # file that is not the last one lost bytes in a copy, not in a crash: passed over too.
        lost_in_copy = seg.restored_from is not None and not last
        lost_flushed = False
        walk = RecordWalk(seg, 0, seg.data_size, crc_from=trust,
                          resync_until=seg.data_size if lost_in_copy else trust,
                          rows=RECOVERY_ROWS)
        count = verified = tmin = tmax = 0
        for run in walk.runs():   # runs of good records, checked in one compiled pass each
            if isinstance(run, Damage):
                continue
            n = len(run)
            stamps = run.fields[F_STORE_TS]
            if count == 0:
                tmin = int(stamps[0])
            tmax = int(stamps[n - 1])
            count += n
            verified += int(np.count_nonzero(run.positions + run.sizes > trust))
        report.records_walked += count
        report.records_verified += verified
        damage = walk.damage
        position = walk.position
        if damage and damage[-1].end == seg.end_offset and not walk.closed:
            cut = damage[-1]
            if last:   # nothing good after it: the end of the log, not damage in its middle
                damage, lost_flushed = damage[:-1], cut.offset < seg.base_offset + trust
                position, walk.stopped = cut.offset - seg.base_offset, (
                    f"{cut.why}; the checkpoint said the log was flushed up to offset "
                    f"{flushed}: the flushed records after this point are lost")
            elif modify and not any(seg.mm[max(HEADER_AREA + cut.offset - seg.base_offset,
                                               seg.restored_from or 0):
                                           HEADER_AREA + seg.data_size]):
                # Zeros up to the segment's end (a cut file, the record the cut went through
                # included): close it as a roll does.
                rec.write_blank(seg.mm, HEADER_AREA + cut.offset - seg.base_offset, cut.length)
                seg.file_ops.msync(seg.path, seg.mm, HEADER_AREA + cut.offset - seg.base_offset,
                                   cut.length, seg.fd)
                report.closed_gaps.append(cut)
                damage = damage[:-1]
                walk.closed = True
        for d in damage:
            log.error("commit log %s: damaged record at %s; it is never served, every good "
                      "record around it is kept (`strata verify` lists it)", seg.path.name, d)
        report.corrupt_records += damage
        seg.record_count, seg.min_store_timestamp, seg.max_store_timestamp = count, tmin, tmax
        if walk.closed or position == seg.data_size:
            seg.set_positions(seg.data_size)
            if not seg.sealed and modify:
                clog._to_seal.append(seg)
            end = seg.end_offset
            continue
        seg.set_positions(position)
        end = seg.base_offset + position
        problem = walk.stopped
        break
    report.end_offset = end
    # Anything after `end` is not part of the log.
    tail = clog.segments.find(end)
    had_more = False
    if tail is not None:
        with tail.view(end - tail.base_offset, min(tail.data_size, end - tail.base_offset + 8)) as mv:
            had_more = any(mv)
    beyond = [s for s in segs if s.base_offset > end]
    if problem is not None and (had_more or beyond or lost_flushed):
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
