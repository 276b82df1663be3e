"""The garbage collector: deletes emptied files and combines pairs of files (≤3.12 design).

Combining (left, right), both locked so no reader, remove or contains touches them:

1. read both files; a record is live if the index points at exactly its (file, offset) with a
   ref count above 0; index entries at ref 0 that point into the pair are dropped;
2. keep the left file's contiguous live prefix where it is;
3. copy the left file's scattered live records to ``<left>.rst`` (fsynced), truncate the left
   file at the end of the prefix, append the copies, delete the temp file;
4. append the right file's live records to the left file (fsynced);
5. point the index at the new offsets, fold the right file's summary row into the left's, and
   unlock; then delete the right file.

Every byte of live data exists in at least one whole copy at every step, so a crash anywhere
loses nothing: start-up folds a leftover temp file back into its file and the dirty scan claims
the first copy of each referenced message. Messages only ever move to older files or lower
offsets, so a message nobody removes sinks to the bottom of the oldest file and stays there.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from strata.errors import StrataError
from strata.files.io import fsync_dir

from . import layout
from .files import append_and_sync, read_file, scan_columns, truncate_and_sync

if TYPE_CHECKING:  # pragma: no cover
    from .store import RefStore

log = logging.getLogger(__name__)

COMBINE_STEPS = ("combine_locked", "temp_written", "left_truncated", "temp_appended",
                 "temp_deleted", "right_appended", "index_updated", "right_deleted")
DELETE_STEPS = ("delete_locked", "delete_index_updated", "delete_unlinked")


class GarbageCollector:
    """The GC thread and its job queues (deletes first, then at most one combine)."""

    def __init__(self, store: "RefStore") -> None:
        self.store = store
        self.deletes: collections.deque[int] = collections.deque()
        self.combines: collections.deque[tuple[int, int]] = collections.deque()
        self.combine_pending = False
        self.forced = False
        self.running: tuple | None = None
        self.combined = 0
        self.deleted = 0
        self.bytes_moved = 0
        self.error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="refstore-gc", daemon=True)

    # ------------------------------------------------------------------ thread control

    def start(self) -> None:
        self._thread.start()

    def stop(self, join_timeout: float | None = None) -> None:
        """Finish the job in progress, then unlock the files of jobs never started."""
        st = self.store
        with st._lock:
            self._stop = True
            st._changed.notify_all()
        self._thread.join(join_timeout)
        with st._lock:
            files = st._summary.files
            for left, right in self.combines:
                for n in (left, right):
                    if n in files:
                        files[n].locked = False
            for n in self.deletes:
                if n in files:
                    files[n].locked = False
                    files[n].pending_delete = False
            self.combines.clear()
            self.deletes.clear()
            self.combine_pending = False
            st._changed.notify_all()

    def _busy(self) -> bool:
        return bool(self.deletes or self.combines or self.running)

    def _raise_error(self) -> None:
        if self.error is not None:
            raise StrataError(f"ref store GC failed: {self.error!r}") from self.error

    def _wait(self, deadline: float | None) -> None:
        st = self.store
        self._raise_error()
        if st._crashed or st._closed:
            raise StrataError("ref store closed while waiting for the GC")
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("the ref store GC did not finish in time")
        st._changed.wait(0.25 if left is None else min(0.25, left))

    def run_until_idle(self, timeout: float | None = None):
        """Schedule work regardless of ``auto_gc`` and wait until nothing more is due."""
        st = self.store
        deadline = None if timeout is None else time.monotonic() + timeout
        with st._lock:
            self.forced = True
            try:
                st._maybe_gc(True, force=True)
                while self._busy():
                    self._wait(deadline)
                self._raise_error()
            finally:
                self.forced = False
        return st.stats()

    def wait_idle(self, timeout: float | None = None):
        st = self.store
        deadline = None if timeout is None else time.monotonic() + timeout
        with st._lock:
            while self._busy():
                self._wait(deadline)
            self._raise_error()
        return st.stats()

    def _loop(self) -> None:
        st = self.store
        lock = st._lock
        while True:
            with lock:
                while not (self.deletes or self.combines) and not self._stop and \
                        not st._crashed:
                    st._changed.wait()
                if self._stop or st._crashed:
                    return
                job = (("delete", self.deletes.popleft()) if self.deletes
                       else ("combine",) + self.combines.popleft())
                self.running = job
            try:
                if job[0] == "delete":
                    self._delete(job[1])
                else:
                    self._combine(job[1], job[2])
            except BaseException as exc:
                if not st._crashed:
                    log.error("ref store %s: GC %s failed: %r", st.directory, job, exc)
                with lock:
                    self.error = exc
                    if st.failure is None:
                        st.failure = exc
                    self.running = None
                    st._changed.notify_all()
                return
            with lock:
                self.running = None
                if job[0] == "combine":
                    self.combine_pending = False
                st._maybe_gc(True)
                st._changed.notify_all()

    def _wait_no_readers(self, *numbers: int) -> None:
        st = self.store
        with st._lock:
            while any(st._summary.files[n].readers for n in numbers):
                if st._crashed:
                    raise StrataError("ref store crashed")
                st._changed.wait(0.25)

    # ------------------------------------------------------------------ jobs

    def _delete(self, number: int) -> None:
        """Drop an emptied file: vacuum its ref-0 index entries, its summary row, the file."""
        st = self.store
        st._fault("delete_locked", file=number)
        self._wait_no_readers(number)
        path = layout.data_path(st.directory, number)
        offs_l, _totals, ids = scan_columns(read_file(path))
        offs = np.array(offs_l, dtype=np.int64)
        with st._lock:
            index = st._index
            refs = index.refs_at(ids, number, offs)
            if len(refs) and refs.max() > 0:
                j = int(np.argmax(refs))
                log.error("ref store %s: file %d looked empty but message %s in it has "
                          "%d references; the file is kept", st.directory, number,
                          ids[j].hex(), int(refs[j]))
                info = st._summary.files[number]
                info.locked = info.pending_delete = False
                st._release_parked({number})
                st._changed.notify_all()
                return
            index.delete_at(ids, number, offs)
            st._summary.remove(number)
            st._release_parked({number})
            st._changed.notify_all()
        st._fault("delete_index_updated", file=number)
        st._readers.close(number)
        os.unlink(path)
        fsync_dir(st.directory)
        self.deleted += 1
        st._fault("delete_unlinked", file=number)

    def _live(self, number: int, data: bytes) -> list[tuple[int, int, bytes]]:
        """Records of ``data`` that the index says are live there (lock held); ref-0 entries
        pointing into the file are dropped on the way."""
        index = self.store._index
        offs_l, totals, ids = scan_columns(data)
        offs = np.array(offs_l, dtype=np.int64)
        refs = index.refs_at(ids, number, offs)
        dead = np.flatnonzero(refs == 0)
        if len(dead):
            index.delete_at([ids[j] for j in dead.tolist()], number, offs[dead])
        return [(offs_l[j], totals[j], ids[j]) for j in np.flatnonzero(refs > 0).tolist()]

    def _combine(self, left: int, right: int) -> None:
        st = self.store
        d = st.directory
        st._fault("combine_locked", left=left, right=right)
        self._wait_no_readers(left, right)
        lpath = layout.data_path(d, left)
        rpath = layout.data_path(d, right)
        ldata = read_file(lpath)
        rdata = read_file(rpath)
        with st._lock:
            live_l = self._live(left, ldata)
            live_r = self._live(right, rdata)

        prefix_end = 0
        k = 0
        for off, total, _m in live_l:
            if off != prefix_end:
                break
            prefix_end += total
            k += 1
        scattered = live_l[k:]

        # left's scattered live records go through a temp file, then on top of the prefix
        end = prefix_end
        if scattered or len(ldata) != prefix_end:
            tpath = layout.temp_path(d, left)
            moved = b"".join(ldata[off:off + total] for off, total, _m in scattered)
            if scattered:
                append_and_sync(tpath, moved, at=0)
                fsync_dir(d)
                st._fault("temp_written", left=left, right=right, temp=tpath)
            truncate_and_sync(lpath, prefix_end)
            st._fault("left_truncated", left=left, right=right)
            if scattered:
                end = append_and_sync(lpath, moved, at=prefix_end)
                st._fault("temp_appended", left=left, right=right)
                os.unlink(tpath)
                fsync_dir(d)
                st._fault("temp_deleted", left=left, right=right)
        # then the right file's live records
        right_at = end
        if live_r:
            end = append_and_sync(
                lpath, b"".join(rdata[off:off + total] for off, total, _m in live_r),
                at=right_at)
        st._fault("right_appended", left=left, right=right)

        with st._lock:
            pos = _relocate(st._index, scattered, left, left, prefix_end)
            _relocate(st._index, live_r, right, left, pos)
            s = st._summary
            linfo = s.files[left]
            s.remove(right)
            s.sum_valid += end - linfo.valid
            s.sum_size += end - linfo.size
            linfo.valid = linfo.size = end
            linfo.locked = False
            st._release_parked({left, right})
            self.combined += 1
            self.bytes_moved += (end - prefix_end)
            st._changed.notify_all()
        st._fault("index_updated", left=left, right=right)
        st._readers.close(right)
        os.unlink(rpath)
        fsync_dir(d)
        st._fault("right_deleted", left=left, right=right)


def _relocate(index, records: list, file: int, to_file: int, at: int) -> int:
    """Point the index entries of ``records`` ((offset, size, id) in ``file``) at the same
    records laid back to back in ``to_file`` from ``at``; returns the end."""
    if not records:
        return at
    offs = np.fromiter((off for off, _total, _m in records), dtype=np.int64,
                       count=len(records))
    totals = np.fromiter((total for _off, total, _m in records), dtype=np.int64,
                         count=len(records))
    to = np.cumsum(totals) - totals + at
    index.relocate([m for _off, _total, m in records], file, offs, to_file, to)
    return at + int(totals.sum())
