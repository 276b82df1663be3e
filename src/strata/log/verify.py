"""What a check of the commit log reports, the check of a sealed segment's footer, and the
check of the whole log that ``strata verify`` runs.

``Problem`` is the one row every maintenance check reports (``strata spark verify`` lists them);
``check_footer`` compares a sealed segment's footer with what a walk of its records found:
record count, data length, first/last store time and the CRC32C of the data. ``verify_log``
walks every record of every segment with ``RecordWalk`` (CRC32C included), going on past a
damaged record at the next good one, so every damaged record is listed, not only the first.
(``strata spark verify`` walks segments with ``strata.index.segment_scan.SegmentScan``.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from strata.errors import CorruptRecordError
from strata.files.layout import COMMITLOG_DIR
from strata.files.segment import MappedSegment
from strata.files.segment_queue import SegmentQueue
from strata.format.segment import FOOTER_BYTES, HEADER_AREA
from strata.format.record_table import F_STORE_TS
from strata.log.record_walk import Damage, RecordWalk


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


def record_problem_kind(exc: CorruptRecordError | str) -> str:
    """``crc-mismatch`` for a checksum failure, ``bad-record`` for any structural one."""
    return "crc-mismatch" if str(exc).startswith("CRC32C mismatch") else "bad-record"


def check_footer(seg: MappedSegment, file: str, records: int, min_ts: int, max_ts: int, *,
                 complete: bool, closed: bool) -> list[Problem]:
    """Problems with ``seg``'s footer given what a walk of its records found (``complete``:
    the walk reached the end without a problem; ``closed``: it ended with a blank record)."""
    out: list[Problem] = []
    end = HEADER_AREA + seg.data_size
    footer = seg.footer
    where = seg.end_offset
    if footer is None:
        if any(seg.mm[end:end + FOOTER_BYTES]):
            out.append(Problem(file, where, "footer-damaged",
                               "footer bytes are present but fail their magic or checksum"))
        return out
    if footer.data_length != seg.data_size:
        out.append(Problem(file, where, "footer-mismatch",
                           f"sealed footer says {footer.data_length} data bytes; a sealed "
                           f"segment holds {seg.data_size}"))
    elif seg.data_crc(footer.data_length) != footer.data_crc:
        out.append(Problem(file, where, "footer-crc",
                           "CRC32C of the segment's data does not match its footer (some byte "
                           "changed after sealing)"))
    if not complete:
        return out                   # counts would only repeat the record problem
    found = (records, min_ts, max_ts)
    said = (footer.record_count, footer.min_store_timestamp, footer.max_store_timestamp)
    if found != said:
        out.append(Problem(file, where, "footer-mismatch",
                           f"footer says {said[0]} records stored {said[1]}..{said[2]}; the "
                           f"segment holds {found[0]} records stored {found[1]}..{found[2]}"))
    if not closed:
        out.append(Problem(file, where, "footer-mismatch",
                           "segment is sealed but its records do not end with a blank record at "
                           "the segment's end"))
    return out


@dataclass
class LogCheck:
    """What ``verify_log`` found: records that passed every check, and the problems."""

    records: int
    segments: int
    problems: list[Problem]


def verify_log(segments: SegmentQueue, limit: int, *,
               progress: Callable[[int], None] | None = None) -> LogCheck:
    """Check every record of the log below ``limit`` (magic, lengths at both ends, field
    lengths, physical offset, CRC32C) and every sealed footer. A damaged record is one
    problem; the walk goes on at the next good record. ``progress`` gets the bytes done."""
    segs = list(segments.segments)
    check = LogCheck(0, len(segs), [])
    done = 0
    for seg in segs:
        file = f"commitlog/{seg.path.name}"
        end = max(0, min(seg.committed, limit - seg.base_offset))
        walk = RecordWalk(seg, 0, end, rows=1 << 14)
        count = tmin = tmax = 0
        for run in walk.runs():
            if isinstance(run, Damage):
                check.problems.append(Problem(
                    file, run.offset, record_problem_kind(run.why),
                    f"{run.why} (file byte {HEADER_AREA + run.offset - seg.base_offset}; the "
                    f"next {run.length} bytes hold no good record and were passed over)"))
                if progress is not None:
                    progress(done + run.offset - seg.base_offset + run.length)
                continue
            stamps = run.fields[F_STORE_TS]
            if count == 0:
                tmin = int(stamps[0])
            tmax, count = int(stamps[-1]), count + len(run)
            if progress is not None:   # per run of up to 16,384 records: the bar moves
                progress(done + int(run.positions[-1] + run.sizes[-1]))
        check.records += count
        if seg.committed == seg.data_size:
            check.problems += check_footer(
                seg, file, count, tmin, tmax, closed=walk.closed,
                complete=not walk.damage and (walk.closed or walk.position >= end))
        done += seg.committed
        if progress is not None:
            progress(done)
    return check


def recovery_problems(report, segments: SegmentQueue) -> list[Problem]:
    """What a read-only open's recovery (``report``: its ``RecoveryReport``) found that a
    writer's open would report as lost, as the problems ``strata verify`` lists: the torn tail
    it would cut (kept aside in a quarantine file first: the record there, if one was meant to
    start there, is lost) and segment files the checkpoint covers that are gone."""
    out: list[Problem] = []
    if report is None:
        return out
    if report.truncated_at is not None:
        seg = segments.find(report.truncated_at)
        what = (f"; segment files {', '.join(report.dropped_segments)} would be dropped"
                if report.dropped_segments else "")
        out.append(Problem(f"{COMMITLOG_DIR}/{seg.path.name}" if seg is not None else COMMITLOG_DIR,
                           report.truncated_at, "log-end",
                           f"the log ends here ({report.problem}); the next writer's recovery "
                           f"keeps what follows in a quarantine file and cuts it{what}"))
    for name in report.missing_segments:
        out.append(Problem(f"commitlog/{name}", int(name), "missing-segment",
                           report.problem or "segment file missing"))
    return out
