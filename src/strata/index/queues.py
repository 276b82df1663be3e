"""All consume queues of a store (``consumequeue/<topic>/<queue id>/``) and the two standard
dispatchers: consume-queue units and key-index entries."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from strata.files.io import DEFAULT_FILE_OPS, FileOps, disk_full_or_same
from strata.format import unit_kernels as uk
from strata.format.consume_queue import UNIT_DTYPE, UNIT_SIZE
from strata.index.consume_queue import ConsumeQueue
from strata.index.dispatch import TX_PREPARED, TX_ROLLBACK, TX_TYPE_MASK, DispatchRequest
from strata.index.dispatch_batch import SMALL_BATCH, DispatchBatch
from strata.index.key_index import KeyIndex

log = logging.getLogger(__name__)


class ConsumeQueueSet:
    """The consume queues of every (topic, queue), created on first dispatch."""

    def __init__(self, root: Path, units_per_file: int, *, readonly: bool = False,
                 file_ops: FileOps = DEFAULT_FILE_OPS) -> None:
        self.root = Path(root)
        self.units_per_file = units_per_file
        self.readonly = readonly
        self.file_ops = file_ops
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}

    def _make(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(self.root / topic / str(queue_id), topic, queue_id,
                            self.units_per_file, readonly=self.readonly, file_ops=self.file_ops)

    def load(self) -> None:
        if not self.root.is_dir():
            return
        for tdir in sorted(self.root.iterdir()):
            if not tdir.is_dir():
                continue
            for qdir in sorted(tdir.iterdir()):
                if qdir.is_dir() and qdir.name.isdigit():
                    cq = self._make(tdir.name, int(qdir.name))
                    cq.load()
                    self.queues[(tdir.name, int(qdir.name))] = cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        cq = self.queues.get((topic, queue_id))
        if cq is None and self.readonly:
            qdir = self.root / topic / str(queue_id)
            if qdir.is_dir():
                cq = self._make(topic, queue_id)
                cq.load()
                self.queues[(topic, queue_id)] = cq
        elif cq is not None and self.readonly:
            cq.refresh()
        return cq

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            made = not (self.root / topic / str(queue_id)).is_dir()
            cq = self._make(topic, queue_id)
            cq.load()
            if made and not self.readonly:   # the new directories' names durable too
                for d in (self.root / topic, self.root, self.root.parent):
                    self.file_ops.fsync_dir(d)
            self.queues[(topic, queue_id)] = cq
        return cq

    def reserve(self, topic: str, queue_id: int, first: int, end: int) -> None:
        """Create the queue's directory and the files its units ``first .. end - 1`` need
        (DiskFullError on a full disk), ahead of the records they will index."""
        try:
            self.get_or_create(topic, queue_id).reserve(first, end)
        except OSError as exc:
            raise disk_full_or_same(exc, f"no space left for consume queue {topic}/{queue_id} "
                                    f"under {self.root}")

    def dispatch(self, batch: DispatchBatch | Sequence[DispatchRequest]) -> None:
        """Append each record's unit to its queue (prepared and rolled-back transactional
        records get none). A larger batch's units are grouped by queue in one compiled pass;
        a queue whose units continue its newest file is written with one slice copy
        (``ConsumeQueue.append_run``), any other (a replay, a gap, a new file) by
        ``put_units``."""
        if not isinstance(batch, DispatchBatch):
            batch = DispatchBatch.from_requests(batch)
        if not len(batch):
            return
        if len(batch) <= SMALL_BATCH:  # a few records: group them in plain Python
            grouped: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
            for code, qid, qoff, off, size, th, flags in zip(
                    batch.topic_codes.tolist(), batch.queue_ids.tolist(),
                    batch.queue_offsets.tolist(), batch.offsets.tolist(), batch.sizes.tolist(),
                    batch.tag_hashes.tolist(), batch.sys_flags.tolist()):
                tx = flags & TX_TYPE_MASK
                if tx != TX_PREPARED and tx != TX_ROLLBACK:
                    grouped.setdefault((code, qid), []).append((qoff, off, size, th))
            for (code, qid), units in grouped.items():
                self.get_or_create(batch.topics[code], qid).put_batch(units)
            return
        units, queue_offsets, groups = _grouped_units(batch)
        data = memoryview(units.view(np.uint8))
        topics, queues = batch.topics, self.queues
        for k, lo, hi, q0, run, pend in groups:
            name, qid = topics[k >> 32], k & 0xFFFF_FFFF
            cq = queues.get((name, qid))
            if cq is None or not run or not cq.append_run(q0, data[lo * UNIT_SIZE:
                                                                   hi * UNIT_SIZE], pend):
                self.get_or_create(name, qid).put_units(queue_offsets[lo:hi], units[lo:hi])

    def truncate_by_phys(self, phys_end: int) -> int:
        return sum(cq.truncate_by_phys(phys_end) for cq in self.queues.values())

    def correct_min_offsets(self, min_phys: int) -> None:
        for cq in self.queues.values():
            cq.correct_min_offset(min_phys)

    def delete_files_below(self, min_phys: int) -> int:
        return sum(cq.delete_files_below(min_phys) for cq in self.queues.values())

    def flush(self) -> None:
        for cq in list(self.queues.values()):
            cq.flush()

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.queues if k[0] == topic]:
            self.queues.pop(key).destroy()
        shutil.rmtree(self.root / topic, ignore_errors=True)

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.queues.clear()


def _grouped_units(batch: DispatchBatch) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """The batch's units (UNIT_DTYPE) queue by queue, their queue offsets, and a row per queue:
    ``[key (topic code << 32 | queue id), first, end (positions in the units), first queue
    offset, 1 if its offsets are one run, end of its last record]``. Prepared and rolled-back
    transactional records get no unit. One compiled pass (``format.unit_kernels``); numpy's
    sort for a batch that touches very many queues."""
    n = len(batch)
    raw = np.empty(n * UNIT_SIZE, np.uint8)
    queue_offsets = np.empty(n, np.int64)
    groups = np.empty((uk.MAX_GROUPS, 6), np.int64)
    m, count = uk.group_units(batch.topic_codes, batch.queue_ids, batch.sys_flags,
                              batch.queue_offsets, batch.offsets, batch.sizes,
                              batch.tag_hashes, raw, queue_offsets, groups,
                              np.empty(n, np.int64), TX_TYPE_MASK, TX_PREPARED, TX_ROLLBACK)
    if m >= 0:
        return (raw[:count * UNIT_SIZE].view(UNIT_DTYPE), queue_offsets[:count],
                groups[:m].tolist())
    tx = batch.sys_flags & TX_TYPE_MASK
    rows = np.flatnonzero((tx != TX_PREPARED) & (tx != TX_ROLLBACK))
    key = (batch.topic_codes[rows] << 32) | batch.queue_ids[rows]
    perm = np.argsort(key, kind="stable")
    order, key = rows[perm], key[perm]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(key)) + 1))
    ends = np.append(starts[1:], len(order))
    units = np.empty(len(order), UNIT_DTYPE)
    phys, sizes = batch.offsets[order], batch.sizes[order]
    units["offset"] = phys
    units["size"] = sizes
    units["tag"] = batch.tag_hashes[order]
    queue_offsets = batch.queue_offsets[order]
    first = queue_offsets[starts]
    run = (queue_offsets[ends - 1] - first) == (ends - starts - 1)   # ascending offsets
    table = np.stack([key[starts], starts, ends, first, run, phys[ends - 1] + sizes[ends - 1]])
    return units, queue_offsets, table.T.tolist()


NEVER = np.iinfo(np.int64).max   # no record's offset reaches it
GATE_ALL_TOPICS = 64   # up to this many topic names, the gate looks all of them up


class TopicGate:
    """Consume-queue dispatcher in front of ``queues`` that drops records of deleted (or
    re-created) topics: a record is dispatched only if its topic is in ``table.queues`` and it
    lies at or after ``table.since[topic]``. ``table`` is read at every batch (the store's
    topic table, or a snapshot of it for rebuild-index)."""

    def __init__(self, table, queues: ConsumeQueueSet) -> None:
        self.table = table
        self.queues = queues

    def dispatch(self, batch: DispatchBatch | Sequence[DispatchRequest]) -> None:
        if not isinstance(batch, DispatchBatch):
            batch = DispatchBatch.from_requests(batch)
        since = self.table.since
        known = self.table.queues
        if len(batch) <= SMALL_BATCH:
            topics = batch.topics
            kept = [topics[c] in known and off >= since.get(topics[c], 0)
                    for c, off in zip(batch.topic_codes.tolist(), batch.offsets.tolist())]
            if all(kept):
                self.queues.dispatch(batch)
            elif any(kept):
                self.queues.dispatch(batch.select(np.array(kept)))
            return
        # each topic's first kept offset (NEVER: not a topic now), looked up per record at once
        topics = batch.topics
        if len(topics) <= GATE_ALL_TOPICS:
            first = np.array([since.get(t, 0) if t in known else NEVER for t in topics],
                             np.int64)
        else:   # a reader that has seen very many topics: only this batch's
            first = np.full(len(topics), NEVER, np.int64)
            for code in np.unique(batch.topic_codes).tolist():
                if topics[code] in known:
                    first[code] = since.get(topics[code], 0)
        keep = batch.offsets >= first[batch.topic_codes]
        if keep.all():
            self.queues.dispatch(batch)
        elif keep.any():
            self.queues.dispatch(batch.select(keep))


class KeyIndexDispatcher:
    """Indexes ``topic#key`` for every key and the unique key of each record."""

    def __init__(self, index: KeyIndex) -> None:
        self.index = index

    def dispatch(self, batch: DispatchBatch | Sequence[DispatchRequest]) -> None:
        if not isinstance(batch, DispatchBatch):
            batch = DispatchBatch.from_requests(batch)
        cols = batch.keys
        if cols is not None and self.index.hashes_keys_by_default:
            # keys found and hashed by the compiled reader: their entries in one compiled pass
            rows = cols.rows
            keep = (batch.sys_flags[rows] & TX_TYPE_MASK) != TX_ROLLBACK
            if not keep.all():
                rows, hashes = rows[keep], cols.hashes[keep]
            else:
                hashes = cols.hashes
            if len(rows):
                self.index.put_hashed(hashes, batch.offsets[rows], batch.store_timestamps[rows])
            return
        if not batch.keyed:
            return
        items = []
        append = items.append
        topics, codes = batch.topics, batch.topic_codes.tolist()
        offsets, stamps = batch.offsets.tolist(), batch.store_timestamps.tolist()
        sys_flags = batch.sys_flags.tolist()
        for row, keys, uniq in batch.keyed:
            if sys_flags[row] & TX_TYPE_MASK == TX_ROLLBACK:
                continue
            prefix = topics[codes[row]] + "#"
            off, ts = offsets[row], stamps[row]
            for k in keys:
                append((prefix + k, off, ts))
            if uniq is not None:
                append((prefix + uniq, off, ts))
        if items:
            self.index.put_batch(items)
