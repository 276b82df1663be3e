"""Checks of a store's consume queues and key index against its commit log (plain Python +
numpy): ``strata verify`` runs them in one process, ``strata spark verify`` one Spark task per
file. Each check looks at its own files only:

* **segment** — the records of one commit-log segment (``strata.index.segment_scan``: the
  dispatch pipeline's reader plus, with ``records``, CRC32C, lengths at both ends, magic,
  physical offset and footer), then for those records: the consume-queue unit at each record's
  queue offset must point back at it (offset, size, tag hash; a missing one is a hole), and the
  key-index entries in the segment's offset range must be exactly one per key (hash of
  ``topic#key``, offset, time delta): an entry that no key of its record hashes to is reported.
* **queue** — every unit of one consume queue: units in log order, each leading to its own
  record (``units_lead_to_records``: a record of that topic, queue, queue offset and size).
* **index** — the structure of one key-index file: header, offsets in order, every chain link
  and slot head exactly where a query walk needs it, counters that cover every entry.

A record's unit and a key's entry are compared only below the *dispatched* offset (for a live
store, what the writer's dispatch pipeline had covered when verify started); above it, up to the
*confirmed* offset, what exists must be right but may be missing.
"""

from __future__ import annotations

import mmap
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from strata.files.layout import COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR
from strata.errors import CorruptStoreError
from strata.files.segment import MappedSegment
from strata.format import key_index as kfmt
from strata.format.consume_queue import BLANK_SIZE
from strata.format.segment import KIND_COMMIT_LOG
from strata.index.dispatch import TX_PREPARED, TX_ROLLBACK, TX_TYPE_MASK
from strata.index.dispatch_batch import DispatchBatch
from strata.index.key_index import KeyIndex
from strata.index.queues import ConsumeQueueSet
from strata.index.segment_scan import SegmentScan
from strata.index.unit_check import units_lead_to_records
from strata.log.commit_log import CommitLog
from strata.log.verify import Problem

MAX_PROBLEMS_PER_KIND = 100   # per task; the rest is summarised in one row

@dataclass(frozen=True)
class Limits:
    """What a check may expect, fixed once by the driver for every task."""

    root: str
    log_min: int        # first commit-log offset still stored
    confirmed: int      # records below this are part of the log
    dispatched: int     # units and entries below this must exist
    topics: dict        # topic -> queue count
    since: dict         # topic -> creation offset (records below it are not dispatched)
    segment_size: int
    units_per_file: int
    index_slots: int
    index_entries: int


class ProblemSink:
    """Collects problems, keeping at most MAX_PROBLEMS_PER_KIND per (file, kind)."""

    def __init__(self) -> None:
        self.rows: list[Problem] = []
        self._counts: Counter = Counter()

    def add(self, file: str, offset: int, kind: str, detail: str) -> None:
        key = (file, kind)
        self._counts[key] += 1
        if self._counts[key] <= MAX_PROBLEMS_PER_KIND:
            self.rows.append(Problem(file, int(offset), kind, detail))

    def extend(self, problems) -> None:
        for p in problems:
            self.add(p.file, p.offset, p.kind, p.detail)

    def finish(self) -> list[Problem]:
        for (file, kind), n in self._counts.items():
            if n > MAX_PROBLEMS_PER_KIND:
                self.rows.append(Problem(file, -1, kind, f"{n - MAX_PROBLEMS_PER_KIND} more "
                                         f"problems of kind {kind} in this file not listed"))
        return self.rows

    @property
    def count(self) -> int:
        return sum(self._counts.values())


@dataclass
class TaskStats:
    """What one task looked at."""

    task: str
    records: int = 0
    bytes: int = 0
    units: int = 0
    entries: int = 0


def cq_file(topic: str, queue_id: int, queue_offset: int, units_per_file: int) -> str:
    first = queue_offset - queue_offset % units_per_file
    return f"consumequeue/{topic}/{queue_id}/{first * 20:020d}"


# --------------------------------------------------------------------------- segment task


def check_segment(path: str, file: str, limit: int, lim: Limits, *,
                  records: bool = True) -> tuple[list[Problem], TaskStats]:
    """The units and key-index entries of the records of one segment; with ``records`` the
    records themselves and the footer too (``strata verify`` checks those on its own)."""
    sink = ProblemSink()
    stats = TaskStats(file)
    try:
        seg = MappedSegment.open(Path(path), KIND_COMMIT_LOG, readonly=True)
    except FileNotFoundError:
        sink.add(file, -1, "missing-file", "the segment file disappeared while verify ran "
                 "(retention deleted it?)")
        return sink.finish(), stats
    except CorruptStoreError as exc:
        sink.add(file, -1, "bad-header", str(exc))
        return sink.finish(), stats
    indexes = _Indexes(lim, sink)
    try:
        # CRC-checked even when the records are reported elsewhere (`strata verify`): a damaged
        # record's fields are noise, and checking its unit by them named a queue offset and a
        # consume-queue file that never were
        scan = SegmentScan(seg, limit, file, verify_crc=True)
        for batch in scan.batches():
            indexes.check(batch)
        if records:
            scan.check_footer()
            sink.extend(scan.problems)
        stats.records, stats.bytes = scan.records, scan.checked_bytes
    finally:
        indexes.close()
        seg.close()
    return sink.finish(), stats


class _Indexes:
    """The consume queues and key index of the store, opened read-only once per task."""

    def __init__(self, lim: Limits, sink: ProblemSink) -> None:
        self.lim, self.sink = lim, sink
        self.queues = ConsumeQueueSet(Path(lim.root) / CONSUMEQUEUE_DIR, lim.units_per_file,
                                      readonly=True)
        self._ki: KeyIndex | None = None
        self._ki_failed = False

    def key_index(self) -> KeyIndex | None:
        if self._ki is None and not self._ki_failed:
            index_dir = Path(self.lim.root) / INDEX_DIR
            try:
                self._ki = KeyIndex(index_dir, slots=self.lim.index_slots,
                                    entries=self.lim.index_entries, readonly=True)
            except CorruptStoreError as exc:
                self._ki_failed = True
                self.sink.add("index", -1, "index-file", str(exc))
        return self._ki

    def check(self, batch: DispatchBatch) -> None:
        if not len(batch):
            return
        _check_units_of(batch, self.lim, self.queues, self.sink)
        _check_entries_of(batch, int(batch.offsets[0]), batch.end, self.lim, self.key_index,
                          self.sink)

    def close(self) -> None:
        self.queues.close()
        if self._ki is not None:
            self._ki.close()


def _check_units_of(batch: DispatchBatch, lim: Limits, queues: ConsumeQueueSet,
                    sink: ProblemSink) -> None:
    """Each record the dispatch pipeline puts in a consume queue has its unit there."""
    offs = batch.offsets
    tx = batch.sys_flags & TX_TYPE_MASK
    keep = (offs < lim.dispatched) & (tx != TX_PREPARED) & (tx != TX_ROLLBACK)
    for code, topic in enumerate(batch.topics):         # the TopicGate's rule
        mine = batch.topic_codes == code
        if topic not in lim.topics:
            keep &= ~mine
        else:
            keep &= ~mine | (offs >= lim.since.get(topic, 0))
    rows = np.flatnonzero(keep)
    if not len(rows):
        return
    key = (batch.topic_codes[rows] << 32) | batch.queue_ids[rows]
    order = rows[np.argsort(key, kind="stable")]
    key = (batch.topic_codes[order] << 32) | batch.queue_ids[order]
    cuts = (np.flatnonzero(np.diff(key)) + 1).tolist()
    for lo, hi in zip([0, *cuts], [*cuts, len(order)]):
        part = order[lo:hi]
        topic, qid = batch.topics[int(key[lo]) >> 32], int(key[lo]) & 0xFFFF_FFFF
        qoff, phys = batch.queue_offsets[part], offs[part]
        size, tag = batch.sizes[part], batch.tag_hashes[part]
        try:
            cq = queues.get(topic, qid)
        except CorruptStoreError as exc:
            sink.add(cq_file(topic, qid, int(qoff[0]), lim.units_per_file), -1, "cq-file",
                     str(exc))
            continue
        have = _units_at(cq, qoff)
        ok = (have[:, 0] == phys) & (have[:, 1] == size) & (have[:, 2] == tag)
        for i in np.flatnonzero(~ok).tolist():
            q = int(qoff[i])
            f = cq_file(topic, qid, q, cq.units_per_file if cq else lim.units_per_file)
            if have[i, 1] == 0:
                sink.add(f, q, "cq-missing",
                         f"record at commit-log offset {int(phys[i])} ({topic}/{qid} offset "
                         f"{q}) has no consume-queue unit")
            else:
                sink.add(f, q, "cq-mismatch",
                         f"unit says (offset {int(have[i, 0])}, size {int(have[i, 1])}, tag "
                         f"hash {int(have[i, 2])}); the record at {int(phys[i])} has (size "
                         f"{int(size[i])}, tag hash {int(tag[i])})")


def _units_at(cq, qoff: np.ndarray) -> np.ndarray:
    """(offset, size, tag) of the units at the given queue offsets; zeros where there is none."""
    out = np.zeros((len(qoff), 3), np.int64)
    if cq is None or not len(qoff):
        return out
    lo = max(int(qoff.min()), cq.min_offset())
    hi = min(int(qoff.max()) + 1, cq.max_offset())
    if hi <= lo:
        return out
    table = np.zeros((hi - lo, 3), np.int64)
    pos = lo
    while pos < hi:
        units = cq.read_units(pos, hi - pos)
        if len(units) == 0:
            break
        k = len(units)
        table[pos - lo:pos - lo + k, 0] = units["offset"]
        table[pos - lo:pos - lo + k, 1] = units["size"]
        table[pos - lo:pos - lo + k, 2] = units["tag"]
        pos += k
    inside = (qoff >= lo) & (qoff < pos)
    out[inside] = table[qoff[inside] - lo]
    return out


def _check_entries_of(batch: DispatchBatch, start: int, end: int, lim: Limits, key_index,
                      sink: ProblemSink) -> None:
    """Key-index entries for the records in [start, end): one per key, right hash and time."""
    exp_p: list[int] = []
    exp_h: list[int] = []
    key_hash = kfmt.key_hash
    topics, codes = batch.topics, batch.topic_codes
    offsets, sys_flags = batch.offsets, batch.sys_flags
    for row, keys, uniq in batch.keyed:
        if int(sys_flags[row]) & TX_TYPE_MASK == TX_ROLLBACK:
            continue
        prefix = topics[int(codes[row])] + "#"
        p = int(offsets[row])
        for k in keys:
            exp_p.append(p)
            exp_h.append(key_hash(prefix + k))
        if uniq is not None:
            exp_p.append(p)
            exp_h.append(key_hash(prefix + uniq))
    ki = key_index() if exp_p or (Path(lim.root) / INDEX_DIR).is_dir() else None
    found = ki.entries_between(start, min(end, lim.confirmed)) if ki is not None else []
    rec_phys, rec_ts = batch.offsets, batch.store_timestamps
    got_p, got_h, got_file, got_num = [], [], [], []
    for name, base_ts, first, ents in found:
        file = f"index/{name}"
        phys = ents["offset"].astype(np.int64)
        deltas = ents["delta"].astype(np.int64)
        idx = np.minimum(np.searchsorted(rec_phys, phys), len(rec_phys) - 1)
        known = rec_phys[idx] == phys
        want = np.clip((rec_ts[idx] - base_ts) // 1000, kfmt.DELTA_MIN, kfmt.DELTA_MAX)
        for i in np.flatnonzero(known & (want != deltas)).tolist():
            sink.add(file, first + i, "index-time",
                     f"entry for commit-log offset {int(phys[i])} has time delta "
                     f"{int(deltas[i])}; the record's store time gives {int(want[i])}")
        got_p.append(phys)
        got_h.append(ents["hash"].astype(np.int64))
        got_file.extend([file] * len(phys))
        got_num.append(np.arange(first, first + len(phys), dtype=np.int64))
    ep = np.array(exp_p, np.int64)
    eh = np.array(exp_h, np.int64)
    gp = np.concatenate(got_p) if got_p else np.zeros(0, np.int64)
    gh = np.concatenate(got_h) if got_h else np.zeros(0, np.int64)
    below = lim.dispatched

    def pairs(p, h, mask):
        p, h = p[mask], h[mask]
        o = np.lexsort((h, p))
        return p[o], h[o]

    e_lo, g_lo = pairs(ep, eh, ep < below), pairs(gp, gh, gp < below)
    if len(e_lo[0]) == len(g_lo[0]) and (e_lo[0] == g_lo[0]).all() and \
            (e_lo[1] == g_lo[1]).all() and not (gp >= below).any():
        return
    gn = np.concatenate(got_num) if got_num else np.zeros(0, np.int64)
    e_count = Counter(zip(ep.tolist(), eh.tolist()))
    g_count = Counter(zip(gp.tolist(), gh.tolist()))
    where = {}
    for k, f, n in zip(zip(gp.tolist(), gh.tolist()), got_file, gn.tolist()):
        where.setdefault(k, (f, n))
    for (p, h), n in sorted((e_count - g_count).items()):
        if p < below:
            sink.add("index", p, "index-missing",
                     f"record at commit-log offset {p} has {n} key(s) with hash {h} that the key "
                     "index does not hold")
    for (p, h), n in sorted((g_count - e_count).items()):
        file, num = where[(p, h)]
        sink.add(file, num, "index-extra",
                 f"{n} entry(ies) for commit-log offset {p} with hash {h}, which is not the hash "
                 "of any key of the record there")


# --------------------------------------------------------------------------- queue task


def check_queue(topic: str, queue_id: int, lim: Limits) -> tuple[list[Problem], TaskStats]:
    sink = ProblemSink()
    stats = TaskStats(f"consumequeue/{topic}/{queue_id}")
    queues = ConsumeQueueSet(Path(lim.root) / CONSUMEQUEUE_DIR, lim.units_per_file, readonly=True)
    clog = CommitLog(Path(lim.root) / COMMITLOG_DIR, lim.segment_size, readonly=True,
                     preallocate=False, prefault=False)
    try:
        try:
            cq = queues.get(topic, queue_id)
        except CorruptStoreError as exc:
            sink.add(stats.task, -1, "cq-file", str(exc))
            return sink.finish(), stats
        if cq is None:
            return sink.finish(), stats
        clog.load()
        for seg in clog.segments.segments:   # readable up to lim.confirmed (checks say so)
            seg.committed = seg.data_size
        upf = cq.units_per_file
        off, end = cq.min_offset(), cq.max_offset()
        last_phys = -1
        while off < end:
            units = cq.read_units(off, min(65536, end - off))
            if len(units) == 0:
                sink.add(cq_file(topic, queue_id, off, upf), off, "cq-file",
                         f"no consume-queue file holds queue offset {off} (max {end})")
                break
            qoffs = np.arange(off, off + len(units), dtype=np.int64)
            phys = units["offset"].astype(np.int64)
            size = units["size"].astype(np.int64)
            stats.units += int(np.count_nonzero(size != BLANK_SIZE))
            real = size != BLANK_SIZE     # blank units fill a queue's start (retention) and
            #                                the offsets of prepared/rolled-back records
            for i in np.flatnonzero(size == 0).tolist():
                q = int(qoffs[i])
                sink.add(cq_file(topic, queue_id, q, upf), q, "cq-hole",
                         "unit was never written (zero), though later units were")
            real &= size != 0
            rp, rq, rs = phys[real], qoffs[real], size[real]
            if len(rp):
                seq = np.r_[last_phys, rp]
                for i in np.flatnonzero(np.diff(seq) <= 0).tolist():
                    sink.add(cq_file(topic, queue_id, int(rq[i]), upf), int(rq[i]), "cq-order",
                             f"unit points at commit-log offset {int(rp[i])}, not after the "
                             f"previous unit's {int(seq[i])}")
                last_phys = int(rp[-1])
                keep = (rp >= lim.log_min) & (rp < lim.confirmed)
                _check_points_at(clog, queue_id, rq[keep], rp[keep], rs[keep], topic, upf,
                                 lim.confirmed, sink)
            off += len(units)
    finally:
        queues.close()
        clog.close()
    return sink.finish(), stats


def _check_points_at(clog: CommitLog, queue_id: int, qoff: np.ndarray,
                     phys: np.ndarray, size: np.ndarray, topic: str, upf: int, limit: int,
                     sink: ProblemSink) -> None:
    """Each unit must lead to its own record: one of (topic, queue_id, its queue offset) and
    its size, starting at the unit's commit-log offset."""
    if not len(phys):
        return
    starts, leads = units_lead_to_records(clog, topic, queue_id, qoff, phys, size, limit)
    for i in np.flatnonzero(~leads).tolist():
        q, p = int(qoff[i]), int(phys[i])
        f = cq_file(topic, queue_id, q, upf)
        if not starts[i]:
            sink.add(f, q, "cq-dangling",
                     f"unit points at commit-log offset {p}, where no record starts")
            continue
        if clog.read(p, limit, verify_crc=True) is None:   # the record is damaged, not the
            continue             # unit: its own problem (crc-mismatch, ...) names it already
        found = clog.read(p, limit)
        what = (f"{found.topic}/{found.queue_id} offset {found.queue_offset}, size "
                f"{found.size}" if found is not None else "an unreadable record")
        sink.add(f, q, "cq-mismatch",
                 f"unit ({topic}/{queue_id} offset {q}, size {int(size[i])}) points at "
                 f"commit-log offset {p}, which holds {what}")


# --------------------------------------------------------------------------- index task


def check_index_file(name: str, lim: Limits) -> tuple[list[Problem], TaskStats]:
    sink = ProblemSink()
    file = f"index/{name}"
    stats = TaskStats(file)
    path = Path(lim.root) / INDEX_DIR / name
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return sink.finish(), stats     # deleted by the writer's retention meanwhile
    try:
        length = os.fstat(fd).st_size
        try:
            header = kfmt.KeyIndexHeader.decode(os.pread(fd, kfmt.HEADER_BYTES, 0))
            header.validate(length)
        except ValueError as exc:
            sink.add(file, -1, "index-file", str(exc))
            return sink.finish(), stats
        order = kfmt.parse_file_name(name)
        if order is None or order[0] != header.begin_offset:
            sink.add(file, -1, "index-file", f"its name says offset {order and order[0]} but its "
                     f"header says {header.begin_offset}")
        mm = mmap.mmap(fd, length, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    try:
        _check_index_structure(mm, header, file, sink, stats)
    finally:
        try:
            mm.close()
        except BufferError:
            pass
    return sink.finish(), stats


def _check_index_structure(mm, header, file: str, sink: ProblemSink, stats: TaskStats) -> None:
    flags, end_offset, count, used, min_d, max_d = kfmt.peek_counters(mm)
    S = header.slots
    epos = kfmt.entries_position(S)
    ents = np.frombuffer(mm, kfmt.ENTRY_DTYPE, count, epos)[1:].copy()
    heads = np.frombuffer(mm, "<u4", S, kfmt.HEADER_BYTES).astype(np.int64)
    n = len(ents)
    stats.entries = n
    if n == 0:
        return
    numbers = np.arange(1, n + 1, dtype=np.int64)
    offsets = ents["offset"]
    if offsets[0] != header.begin_offset:
        sink.add(file, 1, "index-order", f"first entry is for offset {int(offsets[0])}, the file "
                 f"begins at {header.begin_offset}")
    for i in np.flatnonzero(offsets[1:] < offsets[:-1]).tolist():
        sink.add(file, i + 2, "index-order", f"entry offset {int(offsets[i + 1])} is below its "
                 f"predecessor's {int(offsets[i])}")
    if int(offsets[-1]) != end_offset:
        sink.add(file, -1, "index-counters", f"counters say the newest entry is for offset "
                 f"{end_offset}; it is for {int(offsets[-1])}")
    # chains: each entry links to the previous entry of its slot, each head to the newest
    slot = ents["hash"].astype(np.int64) % S
    order = np.lexsort((numbers, slot))
    s_sorted, n_sorted = slot[order], numbers[order]
    prev_want = np.zeros(n, np.int64)
    same = np.r_[False, s_sorted[1:] == s_sorted[:-1]]
    prev_want[order[same]] = n_sorted[np.flatnonzero(same) - 1]
    prev = ents["prev"].astype(np.int64)
    for i in np.flatnonzero(prev != prev_want).tolist():
        sink.add(file, i + 1, "index-chain", f"entry links to entry {int(prev[i])}; the previous "
                 f"entry of its slot {int(slot[i])} is {int(prev_want[i])}")
    last_of_slot = np.r_[s_sorted[1:] != s_sorted[:-1], True]
    head_want = np.zeros(S, np.int64)
    head_want[s_sorted[last_of_slot]] = n_sorted[last_of_slot]
    in_progress = heads >= count          # a batch being written (live store) or torn (crash)
    for s in np.flatnonzero((heads != head_want) & ~in_progress).tolist()[:MAX_PROBLEMS_PER_KIND]:
        sink.add(file, int(head_want[s]), "index-chain",
                 f"slot {s} starts its chain at entry {int(heads[s])}, not at its newest "
                 f"entry {int(head_want[s])}")
    if not in_progress.any() and int(np.count_nonzero(heads)) != used:
        sink.add(file, -1, "index-counters", f"counters say {used} used slots; "
                 f"{int(np.count_nonzero(heads))} slots have a chain")
    d = ents["delta"].astype(np.int64)
    if int(d.min()) < min_d or int(d.max()) > max_d:
        sink.add(file, -1, "index-counters",
                 f"entry time deltas span {int(d.min())}..{int(d.max())} but the counters say "
                 f"{min_d}..{max_d} (queries would skip this file)")
    if n > 1 and bool((d[1:] < d[:-1]).any()) and not flags & kfmt.FLAG_TIMES_NOT_MONOTONE:
        sink.add(file, -1, "index-counters", "entry times go backwards but the file is not "
                 "flagged TIMES_NOT_MONOTONE (queries would stop walking too early)")


# --------------------------------------------------------------------------- running


def queue_dirs(root: Path) -> list[tuple[str, int]]:
    """(topic, queue id) of every consume-queue directory of the store at ``root``."""
    base = Path(root) / CONSUMEQUEUE_DIR
    if not base.is_dir():
        return []
    return sorted((t.name, int(q.name)) for t in base.iterdir() if t.is_dir()
                  for q in t.iterdir() if q.is_dir() and q.name.isdigit())


def run_task(task: tuple, lim: Limits, *, records: bool = True
             ) -> tuple[list[Problem], TaskStats]:
    """One check: ``("segment", path, file, limit)``, ``("queue", topic, queue id)`` or
    ``("index", file name)``; ``records=False`` leaves a segment's records to the caller."""
    kind = task[0]
    if kind == "segment":
        return check_segment(task[1], task[2], task[3], lim, records=records)
    if kind == "queue":
        return check_queue(task[1], task[2], lim)
    return check_index_file(task[1], lim)
