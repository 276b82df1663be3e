"""Commit-log recovery: find where the log really ends and make the files agree.

Clean stop (no abort marker, checkpoint carries the exact end): nothing is rescanned; the last
record is checked through its trailer. Unclean stop: sealed segments whose footer is valid are
trusted; from the first unsealed segment on, every record is walked (``RecordWalk``: one
compiled pass per run of records). What the checkpoint says was flushed is checked for
structure only (magic, lengths at both ends, field lengths, physical offset), as Kafka trusts
its recovery point; from the flushed offset on, CRC32C too.

Torn tail or damage (docs/recovery.md): at a bad record the walk looks ahead for the next good
one (``resync_span``: a message record of that very offset with a matching CRC, runs of zeros
skipped at memory speed). A bad stretch with a good record after it, in its segment or a later
one, is damage: it stays where it is, is named in ``corrupt_records`` and logged at error level,
and is never served; every good record around it is kept. Only what follows the last good
record of all is a torn tail. It is cut (zeroed, later segment files deleted) so a later crash
cannot resurrect it, but its bytes are first written to a quarantine file
(``strata.log.quarantine``) named in the report.

A segment that is not the last and does not end with its blank record (a file cut in a copy, a
lost blank record) is closed with one once its stretch is kept aside, and reported in
``closed_gaps``. Segment files the checkpoint says the log reached but that are gone are
reported in ``missing_segments`` with the lost offsets.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from strata.errors import CorruptRecordError, DiskFullError
from strata.files.segment import MappedSegment
from strata.format import record as rec
from strata.format.checkpoint import Checkpoint
from strata.format.record_table import F_STORE_TS
from strata.format.quarantine import QuarantinedPiece
from strata.format.segment import HEADER_AREA, file_name
from strata.log.commit_log import CommitLog
from strata.log.quarantine import keep_aside
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
    corrupt_records: list[Damage] = field(default_factory=list)  # good records after: kept out
    closed_gaps: list[Damage] = field(default_factory=list)  # lost stretches closed with a blank
    restored_segments: list[str] = field(default_factory=list)  # cut files, damaged headers
    quarantine: str | None = None          # where the cut bytes were kept aside (store-relative)
    quarantined_bytes: int = 0
    missing_segments: list[str] = field(default_factory=list)  # files the checkpoint covers

    @property
    def lost_anything(self) -> bool:
        """Records were cut, dropped, found damaged or lost with a cut file."""
        return bool(self.truncated_at is not None and (self.zeroed_bytes or self.dropped_segments)
                    or self.corrupt_records or self.closed_gaps or self.missing_segments)

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
        if self.quarantine:
            s += (f"; the {self.quarantined_bytes} cut bytes were kept aside in "
                  f"{self.quarantine}")
        if self.missing_segments and self.problem and self.truncated_at is None:
            s += f"; {self.problem}"
        for restored in self.restored_segments:
            s += f"; {restored}"
        if self.closed_gaps:
            s += ("; lost stretches closed with a blank record, later segments kept: "
                  + ", ".join(f"[{g.offset}, {g.end})" for g in self.closed_gaps))
        if self.corrupt_records:
            shown = ", ".join(str(d) for d in self.corrupt_records[:5])
            more = len(self.corrupt_records) - 5
            s += (f"; {len(self.corrupt_records)} damaged record(s) kept "
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
    _check_missing(clog, checkpoint, report)
    if modify and report.missing_segments:
        _stand_in(clog, report)
    report.seconds = time.perf_counter() - t0
    segs = clog.segments.segments
    if segs:
        last = segs[-1]
        clog.last_store_timestamp = max(last.max_store_timestamp,
                                        segs[-2].max_store_timestamp if len(segs) > 1 else 0)
    if report.missing_segments:
        log.error("%s", report.summary())
    elif report.truncated_at is not None or report.corrupt_records or restored:
        log.warning("%s", report.summary())
    else:
        log.info("%s", report.summary())
    return report


def _check_missing(clog: CommitLog, cp: Checkpoint | None, report: RecoveryReport) -> None:
    """Segment files gone from the end of the log: the checkpoint says where the log ended
    (exactly after a clean close, at least the flushed offset after a crash); if the files
    there are missing, those offsets are lost, and said so."""
    if cp is None:
        return
    recorded = max(cp.clean_end_offset, cp.flushed_offset)
    segs = clog.segments.segments
    have = segs[-1].end_offset if segs else cp.min_offset
    if recorded <= have:
        return
    size = clog.segments.data_size
    first = have - have % size if not segs else segs[-1].end_offset
    names = [file_name(b) for b in range(first, recorded, size)]
    if not names:
        return
    report.missing_segments = names
    what = (f"commit-log segment file{'s' if len(names) > 1 else ''} {', '.join(names)} "
            f"missing: offsets [{first}, {recorded}) are lost (the checkpoint recorded the "
            f"log {'ending' if cp.clean_end_offset >= 0 else 'flushed'} at {recorded})")
    report.problem = what if report.problem is None else f"{report.problem}; {what}"


def _stand_in(clog: CommitLog, report: RecoveryReport) -> None:
    """Put an empty segment, closed at once with a blank record, in place of each missing one:
    new records go after the lost offsets instead of reusing them (a consumer, the tier or an
    index that knew an offset there never meets another record at it), and a copy of the lost
    file restored over its stand-in brings its records back into the log (``scan``,
    ``read_at``; the consume queues by a rebuild)."""
    for name in report.missing_segments:
        seg = clog.segments.new_segment(int(name))
        seg.reserve(rec.BLANK_MIN_SIZE)
        rec.write_blank(seg.mm, HEADER_AREA, seg.data_size)
        seg.file_ops.msync(seg.path, seg.mm, HEADER_AREA, seg.data_size, seg.fd)
        seg.set_positions(seg.data_size)
        seg.record_count = 0
        clog._to_seal.append(seg)
    report.problem += (f"; an empty segment closed with a blank record stands in for "
                       f"{'each' if len(report.missing_segments) > 1 else 'it'} (new messages "
                       f"go after the lost offsets; restoring the file over it brings its "
                       f"records back into the log)")


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


@dataclass
class _Walked:
    """One walked segment: the walk, its good records' count and store-time range, and where
    its last good record (or closing blank record) ends (0: none)."""

    seg: MappedSegment
    walk: RecordWalk
    count: int
    tmin: int
    tmax: int
    good_end: int


def _walk_segment(seg: MappedSegment, trust: int, report: RecoveryReport) -> _Walked:
    """Walk every record of ``seg``: structure checked everywhere, CRC32C past ``trust``; at a
    bad record look ahead for the next good one (``resync_span``), so damage anywhere is passed
    over and the walk always reaches the segment's end or its closing blank record."""
    walk = RecordWalk(seg, 0, seg.data_size, crc_from=trust, rows=RECOVERY_ROWS)
    count = verified = tmin = tmax = good_end = 0
    for run in walk.runs():   # runs of good records, checked in one compiled pass each
        if isinstance(run, Damage):
            continue
        n = len(run)
        stamps = run.fields[F_STORE_TS]
        if count == 0:
            tmin = int(stamps[0])
        tmax = int(stamps[n - 1])
        count += n
        ends = run.positions + run.sizes
        verified += int(np.count_nonzero(ends > trust))
        good_end = int(ends[n - 1])
    if walk.closed:
        good_end = seg.data_size
    report.records_walked += count
    report.records_verified += verified
    return _Walked(seg, walk, count, tmin, tmax, good_end)


def _tail_damage(w: _Walked) -> Damage | None:
    """The damaged stretch that ends ``w``'s segment unclosed (nothing good after it in the
    segment), or None."""
    d = w.walk.damage
    if d and d[-1].end == w.seg.end_offset and not w.walk.closed:
        return d[-1]
    return None


def _piece(seg: MappedSegment, start: int, zeros_from: int) -> QuarantinedPiece | None:
    """Data bytes [start, zeros_from) of ``seg`` as a quarantine piece (trailing zeros left
    out), None if all are zero."""
    stop = max(start, min(zeros_from, seg.data_size))
    data = bytes(seg.mm[HEADER_AREA + start:HEADER_AREA + stop]).rstrip(b"\0")
    return QuarantinedPiece(seg.base_offset + start, data) if data else None


def _recover_unclean(clog: CommitLog, checkpoint: Checkpoint | None, *,
                     modify: bool) -> RecoveryReport:
    segs = clog.segments.segments
    report = RecoveryReport(clean=False)
    flushed = checkpoint.flushed_offset if checkpoint is not None else 0
    i = 0
    # A sealed segment is trusted on its footer; one sealed past the flushed offset (written
    # since the last checkpoint) only if its data still has the footer's CRC32C (one pass).
    while i < len(segs) and _trusted(segs[i]) and (
            segs[i].end_offset <= flushed
            or segs[i].data_crc(segs[i].data_size) == segs[i].footer.data_crc):
        _adopt_footer(segs[i])
        i += 1
    report.trusted_segments = i
    if i == len(segs):
        report.end_offset = segs[-1].end_offset if segs else 0
        report.verified_from = report.end_offset
        return report
    report.flushed_offset = flushed
    report.verified_from = max(segs[i].base_offset, min(flushed, segs[-1].end_offset))
    # 1. Walk every segment after the trusted ones to its end, passing over damage.
    walked = []
    for k in range(i, len(segs)):
        seg = segs[k]
        report.scanned_segments += 1
        walked.append(_walk_segment(seg, max(0, min(flushed - seg.base_offset, seg.data_size)),
                                    report))
    # 2. The log ends after the last good record of all: what follows it is a torn tail
    # (nothing valid after it, proven by the walks). Everything before it is kept, damage
    # included (named, never served).
    last = max((k for k, w in enumerate(walked) if w.good_end), default=-1)
    if last < 0:
        end = segs[i].base_offset
    else:
        w = walked[last]
        end = w.seg.base_offset + w.good_end
    pieces: list[QuarantinedPiece] = []          # the torn tail's bytes
    closed_pieces: list[QuarantinedPiece] = []   # bytes a blank record closes over
    to_close: list[tuple[MappedSegment, Damage]] = []
    cut: Damage | None = None
    for k, w in enumerate(walked):
        seg = w.seg
        tail = _tail_damage(w)
        if seg.end_offset <= end:          # wholly part of the log
            damage = list(w.walk.damage)
            if tail is not None:
                # Unclosed, good segments after it: close it as a roll does, its bytes first
                # kept aside (a file cut in a copy, a lost blank record, lost pages).
                damage.pop()
                p = _piece(seg, tail.offset - seg.base_offset, w.walk.zeros_from)
                if p is not None:
                    closed_pieces.append(p)
                to_close.append((seg, tail))
            report.corrupt_records += damage
            seg.record_count, seg.min_store_timestamp, seg.max_store_timestamp = \
                w.count, w.tmin, w.tmax
            seg.set_positions(seg.data_size)
            if not seg.sealed and modify:
                clog._to_seal.append(seg)
        elif seg.base_offset <= end:       # the log ends inside it
            pos = end - seg.base_offset
            report.corrupt_records += [d for d in w.walk.damage if d.offset < end]
            seg.record_count, seg.min_store_timestamp, seg.max_store_timestamp = \
                w.count, w.tmin, w.tmax
            seg.set_positions(pos)
            cut = tail
            p = _piece(seg, pos, w.walk.zeros_from if tail is not None else pos)
            if p is not None:
                pieces.append(p)
        else:                              # beyond the end: no good record in it
            p = _piece(seg, 0, w.walk.zeros_from if w.walk.damage else seg.data_size)
            if p is not None:
                pieces.append(p)
    report.end_offset = end
    for d in report.corrupt_records:
        log.error("commit log: damaged record at %s; it is never served, every good record "
                  "around it is kept (`strata verify` lists it)", d)
    beyond = [s for s in segs if s.base_offset > end]
    problem = None
    if cut is not None or pieces or beyond:
        why = cut.why if cut is not None else "no good record after it"
        problem = f"torn tail: {why}"
        if end < flushed:
            problem += (f"; the checkpoint said the log was flushed up to offset {flushed}: "
                        f"the flushed records after this point are lost")
    if modify and (pieces or closed_pieces):
        kept = sorted(closed_pieces + pieces, key=lambda p: p.offset)
        try:
            report.quarantine = keep_aside(clog.directory.parent, kept, clog.segments.file_ops)
        except DiskFullError as exc:
            raise DiskFullError(exc.errno, (
                f"commit log {clog.directory}: recovery must cut a torn tail at offset {end} "
                f"but has no room to keep its {sum(len(p.data) for p in kept)} bytes aside "
                f"first ({exc}); nothing was changed: free space and open the store "
                f"again")) from exc
        report.quarantined_bytes = sum(len(p.data) for p in kept)
    if problem is not None and (pieces or beyond or end < flushed):
        report.truncated_at = end
        report.problem = problem
    if modify:
        for seg, gap in to_close:
            at = HEADER_AREA + gap.offset - seg.base_offset
            rec.write_blank(seg.mm, at, gap.length)
            seg.file_ops.msync(seg.path, seg.mm, at, gap.length, seg.fd)
            report.closed_gaps.append(gap)
        tail_seg = clog.segments.find(end)
        if tail_seg is not None:
            pos = end - tail_seg.base_offset
            # [zeros_from, data_size) is zero already: the look-ahead proved it
            zeros_from = next((w.walk.zeros_from for w in walked if w.seg is tail_seg),
                              tail_seg.data_size)
            report.zeroed_bytes += tail_seg.zero(pos, max(pos, zeros_from))
            if tail_seg.sealed:
                tail_seg.clear_footer()
        for s in beyond:
            report.dropped_segments.append(s.path.name)
        clog.segments.truncate(end)
        if report.dropped_segments and report.truncated_at is None:
            report.truncated_at = end
            report.problem = problem or "segment files beyond the end of the log"
    else:
        report.corrupt_records += [g for _s, g in to_close]
        if beyond:
            report.dropped_segments = [s.path.name for s in beyond]
    if report.truncated_at is None and report.zeroed_bytes:
        report.truncated_at = end
        report.problem = problem
    return report
