"""Recovery of consume queues after the commit log is recovered: keep only units that lead to
their own records, so that re-dispatch from the log rebuilds the rest.

A checkpoint records the dispatched offset ``start`` after flushing every queue, so the units
of records below it are durable. Units written after it may come back from a power loss in any
state: lost (zero), partly written (the commit-log offset lost, the size kept), or present
while the log lost their records. A binary search over such units is not sound, so each queue
is walked back from the last unit that holds any byte, checking every unit against the record
it points at (``units_lead_to_records``), until a right unit of a record below ``start`` (or
one of a record retention deleted, which cannot be checked); the
queue is cut after it and the log re-dispatched from ``start``. When a wrong unit was found,
re-dispatch must start earlier, right after that last right unit's record, in case the wrong
unit was one of a record below ``start``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strata.errors import CorruptRecordError
from strata.format import record as rec
from strata.format.consume_queue import BLANK_SIZE, UNIT_DTYPE, UNIT_SIZE, tag_hash
from strata.index.consume_queue import ConsumeQueue
from strata.index.queues import ConsumeQueueSet
from strata.index.unit_check import units_lead_to_records
from strata.log.commit_log import CommitLog

FIRST_CHUNK, MAX_CHUNK = 16, 4096   # units checked at once: few first (a clean stop's
#                                     last unit is right), more as the walk goes back


@dataclass(frozen=True)
class QueueRecovery:
    """What recovery did to one consume queue."""

    topic: str
    queue_id: int
    dropped: int          # units cut (re-dispatch writes those whose records exist again)
    wrong: int            # units found that did not lead to their own record (holes included)
    replay_from: int      # commit-log offset re-dispatch must start from (0: the topic's start)
    set_aside: tuple[str, ...] = ()   # unusable files set aside at load

    @property
    def damaged(self) -> bool:
        return bool(self.wrong or self.set_aside)

    def describe(self) -> str:
        what = []
        if self.wrong:
            what.append(f"{self.wrong} unit(s) after the checkpoint did not lead to their record")
        if self.set_aside:
            what.append(f"file(s) set aside: {'; '.join(self.set_aside)}")
        return (f"consume queue {self.topic}/{self.queue_id}: {', '.join(what)}; "
                f"{self.dropped} unit(s) dropped, the queue re-dispatched from the commit log")


def recover_queue(cq: ConsumeQueue, clog: CommitLog, start: int, end: int, *,
                  thorough: bool) -> QueueRecovery:
    """Check ``cq``'s units after the checkpoint (``start``) against the log, which ends at
    ``end``, and cut the queue after its last right unit of a record below ``start``.
    ``thorough`` (after an unclean stop) also looks at units past the queue's apparent end."""
    last = cq.segments.last()
    n_end = cq.max_offset()
    if thorough and last is not None:
        # units a power loss left behind can lie past the apparent end (those before the
        # checkpoint are all there; at most one unit per record came after it)
        n_end = cq.data_end(n_end, (end - start) // rec.HEADER_SIZE + 1)
        if n_end > cq.max_offset():
            last.set_positions((n_end - last.base_offset // UNIT_SIZE) * UNIT_SIZE)
    log_min = clog.min_offset()
    lo_bound = cq.min_offset()
    first = cq.segments.first()
    if first is not None:
        lo_bound = max(lo_bound, first.base_offset // UNIT_SIZE)
    wrong = 0
    keep = lo_bound            # units [lo_bound, keep) stay
    replay_from = 0
    hi = n_end
    chunk = FIRST_CHUNK
    while hi > lo_bound:
        file_first = (hi - 1) // cq.units_per_file * cq.units_per_file
        lo = max(lo_bound, file_first, hi - chunk)
        chunk = min(2 * chunk, MAX_CHUNK)
        units = cq.read_units(lo, hi - lo)
        if len(units) < hi - lo:   # no file holds them
            break
        real = np.flatnonzero(units["size"] != BLANK_SIZE)
        phys = units["offset"][real].astype(np.int64)
        _starts, leads = units_lead_to_records(
            clog, cq.topic, cq.queue_id, lo + real, phys, units["size"][real], end)
        # A unit of a record retention deleted cannot be checked; it is taken as right (a
        # unit whose offset was lost reads 0, which only queue offset 0 may hold).
        expired = (phys < log_min) & ((phys > 0) | (lo + real == 0))
        good = np.flatnonzero((leads & (phys < start)) | expired)
        after = real[good[-1] + 1:] if len(good) else real
        wrong += int(np.count_nonzero(~leads[len(real) - len(after):]))   # none expired
        if len(good):
            i = int(real[good[-1]])
            keep = lo + i + 1
            replay_from = int(units["offset"][i]) + int(units["size"][i])
            break
        hi = lo
    dropped = cq.truncate_units(keep) if keep < cq.max_offset() else 0
    set_aside = tuple(cq.set_aside)
    damaged = bool(wrong or set_aside)
    return QueueRecovery(cq.topic, cq.queue_id, dropped, wrong,
                         replay_from if damaged else start, set_aside)


def recover_queues(queues: ConsumeQueueSet, clog: CommitLog, start: int, end: int, *,
                   thorough: bool) -> list[QueueRecovery]:
    """``recover_queue`` for every loaded queue."""
    return [recover_queue(cq, clog, start, end, thorough=thorough)
            for cq in list(queues.queues.values())]


NEIGHBOURS = 64   # units looked at on each side of a wrong one for a right one to bound the walk


def rederive_unit(cq: ConsumeQueue, clog: CommitLog, q: int, limit: int) -> bool:
    """Rewrite unit ``q`` of ``cq`` (found wrong: it does not lead to its own record) from the
    log: the record of ``q`` lies between the records of the nearest right units around it,
    and is looked for there (the whole log below ``limit`` if there is none). True if it was
    found and the unit rewritten (and synced); False leaves the unit as it was."""
    lo_q, hi_q = max(cq.min_offset(), q - NEIGHBOURS), min(cq.max_offset(), q + 1 + NEIGHBOURS)
    parts, offs = [], []
    for a, b in ((lo_q, q), (q + 1, hi_q)):
        while a < b:    # read_units stops at a file's end
            got = cq.read_units(a, b - a)
            if len(got) == 0:
                break
            parts.append(got)
            offs.append(np.arange(a, a + len(got)))
            a += len(got)
    around = np.concatenate(parts) if parts else np.empty(0, UNIT_DTYPE)
    qoffs = np.concatenate(offs) if offs else np.empty(0, np.int64)
    real = around["size"] != BLANK_SIZE
    _s, leads = units_lead_to_records(clog, cq.topic, cq.queue_id, qoffs[real],
                                      around["offset"][real], None, limit)
    right_q, right_p = qoffs[real][leads], around["offset"][real][leads].astype(np.int64)
    before, after = right_p[right_q < q], right_p[right_q > q]
    start = int(before[-1]) if len(before) else clog.min_offset()
    stop = int(after[0]) if len(after) else limit
    for seg, pos, size in clog.iter_records(start, stop):
        try:
            m = clog.decode_at(seg.base_offset + pos)
        except CorruptRecordError:
            continue
        if m.queue_offset == q and m.queue_id == cq.queue_id and m.topic == cq.topic:
            return cq.rewrite_unit(q, seg.base_offset + pos, size, tag_hash(m.tags))
    return False
