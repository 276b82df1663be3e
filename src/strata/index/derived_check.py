"""Derived files are rebuilt, never trusted blindly: the open-time check of consume queues
against the derived-files summary (``<store>/derived``, written with every checkpoint) and
against what a unit can possibly hold.

The summary records, per queue, the units that were durable at the checkpoint, and the key
index's files and end. At open a queue that is missing, shorter than the summary says, starts
later than it did while its records still exist, or holds a zeroed or impossible unit (a size
no record has, an offset past the log's end, offsets that go backwards) is cut before its first
bad unit and re-dispatched from the commit log, right after the last good unit's record.
Nothing here reads the commit log: a clean store costs one numpy pass over its queue units.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from strata.files.io import DEFAULT_FILE_OPS, FileOps
from strata.files.layout import DERIVED_NAME
from strata.format import record as rec
from strata.format.consume_queue import BLANK_SIZE, UNIT_SIZE
from strata.format.derived import DerivedSummary, IndexFileEnd, QueueEnd
from strata.index.consume_queue import ConsumeQueue
from strata.index.key_index import KeyIndex
from strata.index.queues import ConsumeQueueSet

log = logging.getLogger(__name__)

CHECK_CHUNK = 1 << 16   # units looked at per numpy step


class DerivedSummaryFile:
    """``<store>/derived``, replaced atomically with each checkpoint."""

    def __init__(self, directory: Path, file_ops: FileOps = DEFAULT_FILE_OPS) -> None:
        self.path = Path(directory) / DERIVED_NAME
        self.file_ops = file_ops
        self.last_written: DerivedSummary | None = None
        self.problem: str | None = None   # why the last load found no usable summary

    def load(self) -> DerivedSummary | None:
        self.problem = None
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self.problem = f"{self.path} is missing"
            return None
        try:
            return DerivedSummary.decode(raw)
        except ValueError as exc:
            self.problem = f"{self.path}: {exc}"
            log.warning("ignoring unreadable %s: %s", self.path, exc)
            return None

    def store(self, summary: DerivedSummary) -> None:
        if summary == self.last_written:
            return
        self.file_ops.write_atomic(self.path, summary.encode())
        self.last_written = summary


def snapshot(queues: ConsumeQueueSet, key_index: KeyIndex,
             since: dict[str, int]) -> DerivedSummary:
    """What the queues and the index hold now (taken before they are flushed for a
    checkpoint, so that everything it names is durable once the flush returns)."""
    out = []
    for (topic, qid), cq in sorted(list(queues.queues.items())):
        try:
            lo, hi = cq.min_offset(), cq.max_offset()
            if hi <= 0:
                continue
            # a queue emptied by retention still has an end: its next message's offset
            first = cq.unit(lo)[0] if hi > lo else -1
            phys_end = cq.max_phys_end
        except (ValueError, AttributeError, TypeError):   # deleted meanwhile (delete_topic)
            continue
        out.append(QueueEnd(topic, qid, since.get(topic, 0), lo, hi, first, phys_end))
    files, end = key_index.layout()
    return DerivedSummary(tuple(out), tuple(files), end)


@dataclass(frozen=True)
class QueueCheck:
    """A queue the open-time check found wrong, and what was done."""

    topic: str
    queue_id: int
    problem: str
    dropped: int          # units cut (replay writes back those whose records exist)
    replay_from: int      # commit-log offset re-dispatch must start from

    def describe(self) -> str:
        return (f"consume queue {self.topic}/{self.queue_id}: {self.problem}; {self.dropped} "
                f"unit(s) dropped, rebuilt from the commit log from offset {self.replay_from}")


def first_bad_unit(cq: ConsumeQueue, log_end: int, max_size: int) -> tuple[int, int, str]:
    """Walk every unit of ``cq`` (numpy, a chunk at a time) for the first that no record can
    have written: zero (lost), a size outside a record's, a record past ``log_end``, or an
    offset before the previous unit's record. Returns (its number — ``max_offset()`` if none —,
    the commit-log offset just past the last good unit's record (0: none), why)."""
    first = cq.segments.first()
    n = max(cq.min_offset(), first.base_offset // UNIT_SIZE if first is not None else 0)
    hi = cq.max_offset()
    prev_end = 0
    while n < hi:
        units = cq.read_units(n, min(hi - n, CHECK_CHUNK), copy=False)
        if len(units) == 0:
            return n, prev_end, "a unit is missing"
        size = units["size"].astype(np.int64)
        off = units["offset"].astype(np.int64)
        real = size != BLANK_SIZE
        bad = (size == 0) | (real & ((size < rec.HEADER_SIZE) | (size > max_size)
                                     | (off < 0) | (off + size > log_end)))
        ends = np.where(real, off + size, 0)
        # running end of the previous real unit's record (blank units carry it over)
        before = np.maximum.accumulate(np.concatenate(([prev_end], ends[:-1])))
        backwards = real & (off < before)
        hits = np.flatnonzero(bad | backwards)
        if len(hits):
            i = int(hits[0])
            if bad[i]:
                why = "a zeroed unit" if size[i] == 0 else "an impossible unit"
            else:
                why = "a unit whose record goes backwards"
                earlier = np.flatnonzero(real[:i])
                if len(earlier):   # this unit or the real one before it is wrong: cut both
                    i = int(earlier[-1])
            prev_end = int(before[i])
            del units
            return n + i, prev_end, f"{why} at queue offset {n + i}"
        prev_end = max(prev_end, int(ends.max(initial=0)))
        n += len(units)
        del units
    return hi, prev_end, ""


def check_queues(queues: ConsumeQueueSet, expected: dict[tuple[str, int], QueueEnd],
                 since: dict[str, int], log_min: int, log_end: int,
                 max_size: int) -> list[QueueCheck]:
    """Check every loaded queue and every queue ``expected`` names; cut the bad ones (a queue
    whose head is lost goes whole). Returns what was found, with where replay must start."""
    out = []
    for key in sorted(set(queues.queues) | set(expected)):
        topic, qid = key
        want = expected.get(key)
        floor = max(log_min, since.get(topic, 0))
        whole_from = max(floor, want.first_phys) if want is not None else floor
        cq = queues.queues.get(key)
        if cq is None or not cq.segments.segments:
            if want is not None:
                held = (f"units {want.min_offset}..{want.end - 1}" if want.end > want.min_offset
                        else f"its next offset {want.end}")
                out.append(QueueCheck(topic, qid, f"missing (the checkpoint recorded {held})",
                                      0, whole_from))
            continue
        if want is not None and cq.min_offset() > want.min_offset and want.first_phys >= log_min:
            dropped = cq.max_offset() - cq.min_offset()
            queues.queues.pop(key).destroy()
            out.append(QueueCheck(topic, qid, f"starts at offset {cq.min_offset()}, the "
                                  f"checkpoint recorded {want.min_offset}", dropped, whole_from))
            continue
        at, prev_end, why = first_bad_unit(cq, log_end, max_size)
        if not why and want is not None and cq.max_offset() < want.end:
            why = (f"holds units up to {cq.max_offset()}, the checkpoint recorded "
                   f"{want.end}")
        if not why:
            continue
        dropped = cq.truncate_units(at) if at < cq.max_offset() else 0
        replay = max(floor, prev_end) if prev_end else whole_from
        out.append(QueueCheck(topic, qid, why, dropped, replay))
    return out


def trusted_ends(summary: DerivedSummary | None, topics: dict[str, int],
                 since: dict[str, int], log_end: int) -> dict[tuple[str, int], QueueEnd]:
    """The summary's queues that still describe this store: of a topic that exists with the
    same creation offset, and whose records all lie within the recovered log (a power loss
    can take records the queue had units for; such a queue is checked the old way)."""
    if summary is None:
        return {}
    return {(q.topic, q.queue_id): q for q in summary.queues
            if q.topic in topics and q.queue_id < topics[q.topic]
            and since.get(q.topic, 0) == q.since and q.phys_end <= log_end and q.end > 0}


__all__ = ["DERIVED_NAME", "DerivedSummaryFile", "IndexFileEnd", "QueueCheck", "check_queues",
           "first_bad_unit", "snapshot", "trusted_ends"]
