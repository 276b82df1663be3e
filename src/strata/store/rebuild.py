"""Rebuild a stopped store's consume queues and key index from its commit log, then swap them in.

The rebuild holds the store's writer lock from start to end, so no writer can open the store
meanwhile (and it refuses to start while one has it open). It finds the log's end as a writer's
recovery would, without changing a byte of the log; the caller extracts the records of every
segment (the Spark job does it in parallel) and feeds them, in log order, to ``build``, which
writes new files under ``<store>/rebuild.tmp/``. ``swap`` then puts them in place:

1. every new file and directory is fsynced;
2. the checkpoint is rewritten with ``dispatched_offset`` = the log's first offset: "nothing is
   dispatched", and the derived-files summary (``derived``) of the old files is deleted — from
   here on, a writer opening the store would cut ``consumequeue/`` and
   ``index/`` back to the log start and re-dispatch the whole log, whatever state they are in;
3. ``consumequeue`` and ``index`` are renamed to ``rebuild.old/``, the new ones renamed into
   place, the store directory fsynced;
4. the checkpoint gets ``dispatched_offset`` = the log end (the new files cover all of it);
5. ``rebuild.old/`` and ``rebuild.tmp/`` are deleted.

Killed before step 2: the store is as it was; ``rebuild.tmp/`` is left over (the store ignores
it, the next rebuild deletes it). Killed in steps 2-4: the next writer open re-dispatches the
whole log (a slow open, but the result is exactly what dispatch builds; read-only openers may
meanwhile see queues missing). Killed after step 4: done; leftovers go with the next rebuild.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from strata.files.layout import COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR
from strata.errors import StoreNotFoundError
from strata.files.checkpoint import AbortMarker, CheckpointFile
from strata.files.io import file_ops
from strata.files.lock import DirectoryLock
from strata.format.checkpoint import Checkpoint
from strata.index.derived_check import DERIVED_NAME
from strata.index.dispatch_batch import DispatchBatch
from strata.index.rebuild import IndexBuilder, TopicsSnapshot
from strata.log.commit_log import CommitLog
from strata.log.recovery import RecoveryReport, recover
from strata.store.config import StoreConfig
from strata.store.topics import TopicTable

NEW_DIR = "rebuild.tmp"
OLD_DIR = "rebuild.old"


@dataclass(frozen=True)
class SegmentSpan:
    """One commit-log segment and how many of its data bytes belong to the log."""

    path: str          # absolute path of the segment file
    file: str          # relative to the store directory, e.g. commitlog/000...000
    base_offset: int
    limit: int


class IndexRebuild:
    """One rebuild of ``path``'s consume queues and key index (use as a context manager)."""

    def __init__(self, path: str | Path, config: StoreConfig | None = None) -> None:
        self.path = Path(path)
        if not (self.path / COMMITLOG_DIR).is_dir():
            raise StoreNotFoundError(f"no strata store at {self.path} (no {COMMITLOG_DIR}/ inside)")
        self.config = config or StoreConfig()
        self._lock = DirectoryLock(self.path)
        self._lock.acquire()            # StoreLockedError if a writer has the store open
        try:
            self._plan()
        except BaseException:
            self._lock.release()
            raise
        self._builder: IndexBuilder | None = None
        self.swapped = False

    def _plan(self) -> None:
        for leftover in (NEW_DIR, OLD_DIR):
            shutil.rmtree(self.path / leftover, ignore_errors=True)
        self.checkpoint_file = CheckpointFile(self.path)
        self.checkpoint = self.checkpoint_file.load()
        clean = not AbortMarker(self.path).exists()
        clog = CommitLog(self.path / COMMITLOG_DIR, self.config.segment_size, readonly=True,
                         preallocate=False, prefault=False)
        try:
            clog.load()
            self.recovery: RecoveryReport = recover(clog, self.checkpoint, clean, modify=False)
            self.min_offset = clog.min_offset()
            self.end_offset = self.recovery.end_offset
            self.segments = [
                SegmentSpan(str(s.path), f"{COMMITLOG_DIR}/{s.path.name}", s.base_offset,
                            max(0, min(s.committed, self.end_offset - s.base_offset)))
                for s in clog.segment_list() if s.base_offset < self.end_offset]
        finally:
            clog.close()
        table = TopicTable(self.path, readonly=True)
        table.load()
        self.topics = TopicsSnapshot(table.queues, table.since)

    # ------------------------------------------------------------------ build

    def work_dir(self) -> Path:
        """A scratch directory inside ``rebuild.tmp`` (e.g. for extracted record columns)."""
        d = self.path / NEW_DIR / "extract"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def build(self, batches: Iterable[DispatchBatch],
              on_batch: Callable[[int], None] | None = None) -> int:
        """Dispatch every record (batches in log order) into ``<store>/rebuild.tmp``; returns
        the number of records. ``on_batch(records so far)`` reports progress."""
        cfg = self.config
        self._builder = IndexBuilder(self.path / NEW_DIR, self.topics,
                                     units_per_file=cfg.consume_queue_units,
                                     index_slots=cfg.index_slots,
                                     index_entries=cfg.index_entries)
        try:
            for batch in batches:
                self._builder.dispatch(batch)
                if on_batch is not None:
                    on_batch(self._builder.records)
            if self._builder.end > self.end_offset:
                raise ValueError(f"records at {self._builder.end} beyond the log end "
                                 f"{self.end_offset}")
            self._builder.finish()
        except BaseException:
            self._builder.abandon()
            shutil.rmtree(self.path / NEW_DIR, ignore_errors=True)
            raise
        return self._builder.records

    # ------------------------------------------------------------------ swap

    def _store_checkpoint(self, dispatched: int) -> None:
        base = self.checkpoint if self.checkpoint is not None else Checkpoint(
            clean_end_offset=-1, min_offset=self.min_offset)
        self.checkpoint_file.store(dataclasses.replace(base, dispatched_offset=dispatched))

    def swap(self) -> None:
        """Put the built files in place, crash-safely (see the module docstring)."""
        if self._builder is None:
            raise RuntimeError("build() must run before swap()")
        ops = file_ops()
        new, old = self.path / NEW_DIR, self.path / OLD_DIR
        self._store_checkpoint(self.min_offset)                 # 2. "nothing is dispatched"
        # the derived-files summary describes the files about to go: without it the next
        # open checks the new ones on their own (and writes a summary of them)
        summary = self.path / DERIVED_NAME
        if summary.exists():
            summary.unlink()
            ops.fsync_dir(self.path)
        old.mkdir()
        for name in (CONSUMEQUEUE_DIR, INDEX_DIR):              # 3. the rename dance
            if (self.path / name).exists():
                ops.replace(self.path / name, old / name)
            ops.replace(new / name, self.path / name)
        for d in (old, new, self.path):
            ops.fsync_dir(d)
        self._store_checkpoint(self.end_offset)                  # 4. the new files cover it all
        shutil.rmtree(old, ignore_errors=True)                   # 5.
        shutil.rmtree(new, ignore_errors=True)
        self.swapped = True

    def close(self) -> None:
        """Release the writer lock; an unfinished rebuild leaves nothing behind."""
        if not self.swapped:
            shutil.rmtree(self.path / NEW_DIR, ignore_errors=True)
        self._lock.release()

    def __enter__(self) -> "IndexRebuild":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
