"""An ordered run of segment files named by their 20-digit base offsets, plus pre-allocation."""

from __future__ import annotations

import bisect
import logging
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from strata.errors import CorruptStoreError, DiskFullError
from strata.files.io import DEFAULT_FILE_OPS, FileOps
from strata.files.segment import RESERVE_MAX, RESERVE_MIN, MappedSegment
from strata.format.segment import KIND_CONSUME_QUEUE, file_name

log = logging.getLogger(__name__)

ALLOC_SUFFIX = ".alloc"
# The background reserves (and pre-faults) about this many seconds of the writer's appends
# ahead of it: enough to stay ahead of a fast writer, little disk for a slow one.
AHEAD_S = 0.25
RATE_WINDOW_S = 0.2           # the write rate is measured over windows this long


class WriteRate:
    """The rate (bytes/s) at which a writer appends, from the log's end offset at each write:
    smoothed over windows of RATE_WINDOW_S, and the window under way counts as soon as it is
    10 ms old (a burst is seen at once). ``clock`` for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.rate = 0.0
        self._t: float | None = None
        self._end = 0

    def note(self, end: int) -> float:
        """The rate after a write that left the log ending at ``end``."""
        now = self.clock()
        if self._t is None or end < self._end:
            self._t, self._end = now, end
            return self.rate
        dt = now - self._t
        current = (end - self._end) / dt if dt >= 0.01 else 0.0
        if dt >= RATE_WINDOW_S:
            self.rate = current if self.rate == 0.0 else (self.rate + current) / 2
            self._t, self._end = now, end
            return self.rate
        return max(self.rate, current)


def segment_runs(segments: Sequence[MappedSegment], offsets: np.ndarray
                 ) -> list[tuple[int, int, MappedSegment | None]]:
    """Split ``offsets`` (positions in the segments' offset space, ascending as one queue's
    units are) into runs of rows that fall in one segment: ``(first row, end row, segment)``,
    the segment None for rows below the first segment's base. Ascending offsets are cut at the
    segments' bases (a search per segment); offsets out of order (damaged units) are placed
    row by row, so a run is still only ever rows of one segment."""
    n = len(offsets)
    if n == 0:
        return []
    if not segments:
        return [(0, n, None)]
    bases = np.fromiter((s.base_offset for s in segments), np.int64, len(segments))
    if n == 1 or bool((offsets[1:] >= offsets[:-1]).all()):
        starts = np.searchsorted(offsets, bases).tolist() + [n]
        runs = [(0, starts[0], None)] + [(starts[i], starts[i + 1], seg)
                                         for i, seg in enumerate(segments)]
        return [r for r in runs if r[1] > r[0]]
    which = np.searchsorted(bases, offsets, side="right") - 1
    cuts = (np.flatnonzero(np.diff(which)) + 1).tolist()
    return [(lo, hi, segments[int(which[lo])] if which[lo] >= 0 else None)
            for lo, hi in zip([0, *cuts], [*cuts, n])]


class SegmentAllocator:
    """Creates the next segment in the background so that a roll does not stall a put.

    A segment is prepared under a temporary name (``<base>.alloc``), its first stretch
    reserved on disk and pre-faulted in memory, then renamed into place when the writer takes
    it. While the writer fills a segment, ``advance`` reserves and pre-faults the stretch
    ahead of it, on another thread.
    """

    def __init__(self, directory: Path, kind: int, data_size: int, file_ops: FileOps,
                 prefault: bool = True, reserve_min: int = RESERVE_MIN) -> None:
        self.directory = directory
        self.kind = kind
        self.data_size = data_size
        self.file_ops = file_ops
        self.prefault = prefault
        self.reserve_min = reserve_min
        self._lock = threading.Lock()
        self._pending_base: int | None = None
        self._pending: MappedSegment | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._ready: dict[int, MappedSegment] = {}   # prepared now by prepare()
        self._ahead_seg: MappedSegment | None = None   # what the ahead thread works on
        self._ahead_thread: threading.Thread | None = None

    def _prepare(self, base: int) -> MappedSegment:
        tmp = self.directory / (file_name(base) + ALLOC_SUFFIX)
        self.file_ops.remove(tmp)
        return MappedSegment.create(tmp, self.kind, base, self.data_size, self.file_ops,
                                    prefault=self.prefault, reserve_min=self.reserve_min)

    def request(self, base: int) -> None:
        """Start preparing the segment at ``base`` in a background thread."""
        with self._lock:
            if self._pending_base is not None:
                return
            self._pending_base = base
            self._pending = None
            self._error = None

            def work() -> None:
                try:
                    seg = self._prepare(base)
                except BaseException as exc:  # reported to the writer at take()
                    self._error = exc
                    return
                self._pending = seg

            self._thread = threading.Thread(target=work, name="strata-allocate", daemon=True)
            self._thread.start()

    def advance(self, seg: MappedSegment, target: int) -> None:
        """Have data bytes [0, ``target``) of ``seg`` reserved and (with ``prefault``)
        pre-faulted on a background thread; the writer's own ``reserve`` covers any stretch the
        thread has not reached (and reports a full disk)."""
        with self._lock:
            seg.ahead_requested = max(seg.ahead_requested, target)
            self._ahead_seg = seg
            if self._ahead_thread is not None:
                return
            self._ahead_thread = threading.Thread(target=self._ahead_work, daemon=True,
                                                  name=f"strata-reserve-{self.directory.name}")
            self._ahead_thread.start()

    def _ahead_work(self) -> None:
        while True:
            with self._lock:
                seg = self._ahead_seg
                if seg is None or seg.closed or seg.prefaulted >= min(seg.ahead_requested,
                                                                      seg.data_size):
                    self._ahead_thread = None
                    return
                target = seg.ahead_requested
            try:
                seg.reserve(target, exact=True)      # sized to the writer's rate already
                start = seg.prefaulted
                if self.prefault:
                    seg.prefault(start, seg.reserved)
                seg.prefaulted = max(seg.prefaulted, min(seg.reserved, target))
            except (DiskFullError, OSError, ValueError) as exc:
                # Full disk, or the segment closed under us: the writer reserves for itself
                # and reports a full disk before it acknowledges anything.
                log.debug("reserving ahead in %s stopped: %s", seg.path, exc)
                with self._lock:
                    self._ahead_thread = None
                    if self._ahead_seg is seg:
                        self._ahead_seg = None
                return

    def _stop_ahead(self) -> None:
        with self._lock:
            thread, self._ahead_seg = self._ahead_thread, None
        if thread is not None:
            thread.join()

    def prepare(self, base: int, upto: int = 0) -> None:
        """Prepare the segment at ``base`` now, on the calling thread, for a later ``take``,
        with data bytes [0, ``upto``) reserved: a writer that must know the file can be made
        and written (a full disk raises DiskFullError here) before it promises what the file
        will hold."""
        with self._lock:
            ready = self._ready.get(base)
            pending = self._pending_base == base
        if ready is not None:
            ready.reserve(upto)
            return
        if pending:
            return
        seg = self._prepare(base)
        try:
            seg.reserve(upto)
        except BaseException:
            seg.destroy()
            raise
        with self._lock:
            old = self._ready.pop(base, None)
            self._ready[base] = seg
        if old is not None:
            old.destroy()

    def take(self, base: int) -> MappedSegment:
        """The segment at ``base``, renamed into place; prepared now if it was not ready."""
        with self._lock:
            ready = self._ready.pop(base, None)
        if ready is not None:
            return self._into_place(ready, base)
        with self._lock:
            thread, pending_base = self._thread, self._pending_base
        if thread is not None:
            thread.join()
        with self._lock:
            seg = self._pending if pending_base == base else None
            stale = self._pending if pending_base != base else None
            self._pending_base = self._pending = self._thread = None
            self._error = None
        if stale is not None:
            stale.destroy()
        if seg is None:
            seg = self._prepare(base)
        return self._into_place(seg, base)

    def _into_place(self, seg: MappedSegment, base: int) -> MappedSegment:
        final = self.directory / file_name(base)
        self.file_ops.rename(seg.path, final)
        seg.path = final
        return seg

    def cancel(self) -> None:
        """Drop a prepared segment that will not be used (close, truncate); stop reserving
        ahead."""
        self._stop_ahead()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            if self._pending is not None:
                self._pending.destroy()
            self._pending_base = self._pending = self._thread = None
            ready, self._ready = list(self._ready.values()), {}
        for seg in ready:
            seg.destroy()


class SegmentQueue:
    """Segments of one log in offset order; lookup by offset, roll, truncate, delete."""

    def __init__(self, directory: Path, kind: int, data_size: int, *, readonly: bool = False,
                 file_ops: FileOps = DEFAULT_FILE_OPS, preallocate: bool = True,
                 prefault: bool = True, reserve_min: int = RESERVE_MIN) -> None:
        self.directory = Path(directory)
        self.kind = kind
        self.data_size = data_size
        self.readonly = readonly
        self.file_ops = file_ops
        self.segments: list[MappedSegment] = []
        self._bases: list[int] = []
        self.allocator = None if readonly else SegmentAllocator(
            self.directory, kind, data_size, file_ops, prefault, reserve_min)
        self.reserve_min = reserve_min
        self.preallocate = preallocate and not readonly
        self.write_rate = WriteRate()      # sizes the reservation ahead (keep_ahead)

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        """Open every segment file of the directory (read-only openers create nothing)."""
        if not self.directory.is_dir():
            if self.readonly:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
        names = []
        for p in self.directory.iterdir():
            if p.name.endswith(ALLOC_SUFFIX) or p.name.endswith(".tmp"):
                if not self.readonly:
                    self.file_ops.remove(p)
                continue
            if len(p.name) == 20 and p.name.isdigit():
                names.append(p.name)
        for name in sorted(names):
            seg = MappedSegment.open(self.directory / name, self.kind, readonly=self.readonly,
                                     file_ops=self.file_ops, data_size=self.data_size)
            seg.reserve_min = self.reserve_min
            self._append(seg)
        self.check_continuity()

    def refresh(self) -> None:
        """Read-only openers: pick up segments the writer created since ``load``."""
        if not self.directory.is_dir():
            return
        known = set(self._bases)
        for p in sorted(self.directory.iterdir()):
            if len(p.name) == 20 and p.name.isdigit() and int(p.name) not in known:
                if self._bases and int(p.name) < self._bases[-1]:
                    continue
                try:
                    self._append(MappedSegment.open(p, self.kind, readonly=True,
                                                    file_ops=self.file_ops))
                except (CorruptStoreError, FileNotFoundError):
                    break  # being created or deleted right now; look again next time
        # Segments deleted by the writer's retention
        while self.segments and not self.segments[0].path.exists():
            self.segments.pop(0).close()
            self._bases.pop(0)

    def check_continuity(self) -> None:
        for a, b in zip(self.segments, self.segments[1:]):
            if a.base_offset + a.data_size != b.base_offset:
                hint = ("; consume queues are derived from the commit log: with the writer "
                        "stopped, `strata spark rebuild-index` rebuilds them"
                        if self.kind == KIND_CONSUME_QUEUE else "")
                raise CorruptStoreError(
                    f"{self.directory}: segment {b.path.name} does not follow {a.path.name} "
                    f"(expected base {a.base_offset + a.data_size}); a file is missing{hint}")

    def _append(self, seg: MappedSegment) -> None:
        self.segments.append(seg)
        self._bases.append(seg.base_offset)

    # ------------------------------------------------------------------ lookup

    def find(self, offset: int) -> MappedSegment | None:
        """The segment whose data range holds ``offset``, or None."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if offset < seg.end_offset else None

    def index_of(self, seg: MappedSegment) -> int:
        return bisect.bisect_left(self._bases, seg.base_offset)

    def last(self) -> MappedSegment | None:
        return self.segments[-1] if self.segments else None

    def first(self) -> MappedSegment | None:
        return self.segments[0] if self.segments else None

    def min_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    def max_offset(self) -> int:
        """Offset just past the last committed byte."""
        last = self.last()
        return last.base_offset + last.committed if last else 0

    # ------------------------------------------------------------------ changes

    def new_segment(self, base: int) -> MappedSegment:
        """Append a new segment at ``base`` (pre-allocated in the background when possible)."""
        assert self.allocator is not None, "read-only segment queue"
        seg = self.allocator.take(base)
        self._append(seg)
        if self.preallocate:
            self.allocator.request(base + self.data_size)
        return seg

    def keep_ahead(self, seg: MappedSegment) -> None:
        """After a write to ``seg``: have the stretch ahead of its write position reserved and
        pre-faulted in the background, sized to the writer's rate (AHEAD_S of its appends,
        from ``reserve_min`` to RESERVE_MAX), so disk use runs ahead of the data by what the
        next moment's writes need, not by the size the data has reached. Cheap when that is
        under way."""
        rate = self.write_rate.note(seg.base_offset + seg.wrote)
        ahead = min(RESERVE_MAX, max(seg.reserve_min, int(rate * AHEAD_S)))
        target = min(seg.data_size, seg.wrote + ahead)
        if seg.wrote + ahead // 2 > seg.ahead_requested and self.preallocate and self.allocator is not None:
            self.allocator.advance(seg, target)

    def truncate(self, offset: int) -> list[Path]:
        """Drop data at and after ``offset``: later segments are deleted; returns their paths."""
        dropped = []
        while self.segments and self.segments[-1].base_offset > offset:
            seg = self.segments.pop()
            self._bases.pop()
            dropped.append(seg.path)
            seg.destroy()
        if self.allocator is not None:
            self.allocator.cancel()
        return dropped

    def delete_first(self) -> MappedSegment:
        seg = self.segments.pop(0)
        self._bases.pop(0)
        seg.destroy()
        return seg

    def close(self) -> None:
        if self.allocator is not None:
            self.allocator.cancel()
        for seg in self.segments:
            seg.close()
        self.segments.clear()
        self._bases.clear()
