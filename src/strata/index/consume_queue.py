"""One consume queue: fixed 20-byte units of one (topic, queue), in files of N units.

Files are segments (``strata.files``) named by the 20-digit logical byte offset of their first
unit. Units are appended by the dispatch pipeline; ``put`` is idempotent so a replay after a
crash changes nothing that is already there.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from strata.errors import CorruptStoreError
from strata.files.io import DEFAULT_FILE_OPS, FileOps
from strata.files.segment import MappedSegment
from strata.files.segment_queue import SegmentQueue
from strata.format.consume_queue import BLANK_SIZE, BLANK_UNIT, UNIT, UNIT_DTYPE, UNIT_SIZE
from strata.format.segment import HEADER_AREA, KIND_CONSUME_QUEUE

log = logging.getLogger(__name__)

DAMAGED_SUFFIX = ".damaged"   # a file set aside by recovery (kept for inspection)


# A unit as one opaque item: numpy copies those as plain bytes, where a copy of the (packed,
# unaligned) structured dtype goes field by field — 1,000 units in ~1.5 µs instead of ~8 µs.
_UNIT_BYTES = np.dtype((np.void, UNIT_SIZE))


def _copy_units(units: np.ndarray) -> np.ndarray:
    """A writable copy of ``units`` (UNIT_DTYPE), made as a byte copy."""
    return units.view(_UNIT_BYTES).copy().view(UNIT_DTYPE)


def _units(seg: MappedSegment, first: int, n: int) -> np.ndarray:
    """A numpy view of units ``first .. first + n`` of a file (it pins the file's map)."""
    return np.frombuffer(seg.mm, UNIT_DTYPE, n, HEADER_AREA + first * UNIT_SIZE)


def oldest_unit_offset(qdir: Path, scan_units: int) -> int | None:
    """The commit-log offset of the first real unit among the first ``scan_units`` of a queue
    directory's first file (None: none), read with a plain file read (no map is opened)."""
    files = sorted(p for p in qdir.iterdir() if p.name.isdigit() and len(p.name) == 20)
    if not files:
        return None
    with open(files[0], "rb") as f:
        f.seek(HEADER_AREA)
        raw = f.read(UNIT_SIZE * scan_units)
    units = np.frombuffer(raw, UNIT_DTYPE, len(raw) // UNIT_SIZE)
    real = np.flatnonzero((units["size"] > 0) & (units["size"] != BLANK_SIZE))
    return int(units["offset"][real[0]]) if len(real) else None


# A consume-queue file's first reservation (then doubling as it fills): a topic's queues
# take 64 KiB each (3,276 units) until they hold more.
CQ_RESERVE_MIN = 64 << 10


class ConsumeQueue:
    """Units of one queue; offsets here are unit numbers (queue offsets)."""

    def __init__(self, directory: Path, topic: str, queue_id: int, units_per_file: int, *,
                 readonly: bool = False, file_ops: FileOps = DEFAULT_FILE_OPS) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self.file_bytes = units_per_file * UNIT_SIZE
        self.segments = SegmentQueue(Path(directory), KIND_CONSUME_QUEUE, self.file_bytes,
                                     readonly=readonly, file_ops=file_ops, preallocate=False,
                                     prefault=False, reserve_min=CQ_RESERVE_MIN)
        self.readonly = readonly
        self._files_lock = threading.Lock()   # reserve() and dispatch adding a file
        self.min_unit = 0
        self.set_aside: list[str] = []   # files load() set aside as unusable
        self.max_phys_end = 0   # commit-log offset just past the newest unit's record
        self._copied_upto = (-1, 0)   # read-only openers: (file base, units seen complete)

    # ------------------------------------------------------------------ load / recover

    def load(self) -> None:
        self.set_aside = self._load_files()
        self._adopt_file_geometry()
        segs = self.segments.segments
        for seg in segs[:-1]:
            seg.set_positions(seg.data_size)
        if segs:
            last = segs[-1]
            n = self._written_units(last)
            last.set_positions((self._copied(last, n) if self.readonly else n) * UNIT_SIZE)
        self._reset_min()
        self._update_phys_end()

    def _load_files(self) -> list[str]:
        """Open the queue's files. A writer sets aside a file it cannot use (a damaged header,
        a wrong size, a gap before it: the queue is derived from the commit log, so such a
        file must not keep the store from opening) together with every later file, renaming
        each to ``<name>.damaged``; recovery re-dispatches their units from the log. Returns
        ``"<file>: <problem>"`` for each file set aside."""
        try:
            self.segments.load()
            return []
        except CorruptStoreError as exc:
            if self.readonly:
                raise
            problem = str(exc)
        segs = self.segments.segments
        keep = 1 if segs else 0
        while keep < len(segs) and segs[keep - 1].end_offset == segs[keep].base_offset:
            keep += 1
        last_kept = segs[keep - 1].base_offset if keep else -1
        while len(segs) > keep:
            segs.pop().close()
            self.segments._bases.pop()
        out = []
        for p in sorted(self.segments.directory.iterdir()):
            if len(p.name) == 20 and p.name.isdigit() and int(p.name) > last_kept:
                self.segments.file_ops.rename(p, p.with_name(p.name + DAMAGED_SUFFIX))
                out.append(f"{p}: {problem}" if not out else f"{p}: follows a damaged file")
        log.warning("consume queue %s/%d: set aside %s; its units are re-dispatched from the "
                    "commit log", self.topic, self.queue_id, "; ".join(out))
        return out

    def truncate_units(self, n: int) -> int:
        """Drop units ``n`` and later (zeroed, later files deleted); returns units dropped."""
        before = self.max_offset()
        byte = n * UNIT_SIZE
        self.segments.truncate(byte)
        seg = self.segments.find(byte) or self.segments.last()
        if seg is not None and seg.base_offset <= byte <= seg.end_offset:
            pos = byte - seg.base_offset
            seg.zero(pos, seg.data_size)
            seg.set_positions(pos)
        if not self.segments.segments or self.max_offset() < self.min_unit:
            self.min_unit = min(self.min_unit, n)
        self._update_phys_end()
        return max(0, before - n)

    def refresh(self) -> None:
        """Read-only openers: see units the writer appended since."""
        self.segments.refresh()
        self._adopt_file_geometry()
        segs = self.segments.segments
        for seg in segs[:-1]:
            seg.committed = seg.wrote = seg.data_size
        if segs:
            last = segs[-1]
            n = self._copied(last, self._written_units(last)) * UNIT_SIZE
            last.committed = last.wrote = n
        self._reset_min()

    def _adopt_file_geometry(self) -> None:
        """Existing files fix the units per file, whatever the config says (a reader opened
        with default settings, or a writer whose ``consume_queue_units`` changed)."""
        first = self.segments.first()
        if first is None or first.data_size == self.file_bytes:
            return
        if self.file_bytes and not self.readonly:
            log.warning("consume queue %s/%d: files hold %d units each, not %d; keeping %d",
                        self.topic, self.queue_id, first.data_size // UNIT_SIZE,
                        self.units_per_file, first.data_size // UNIT_SIZE)
        self.file_bytes = first.data_size
        self.units_per_file = first.data_size // UNIT_SIZE
        self.segments.data_size = first.data_size
        if self.segments.allocator is not None:
            self.segments.allocator.data_size = first.data_size

    def _written_units(self, seg: MappedSegment) -> int:
        """Units written in ``seg``: binary search for the first unit of size 0."""
        lo, hi = 0, self.units_per_file
        mm = seg.mm
        while lo < hi:
            mid = (lo + hi) // 2
            size = UNIT.unpack_from(mm, HEADER_AREA + mid * UNIT_SIZE)[1]
            if size == 0:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _copied(self, seg: MappedSegment, n: int) -> int:
        """Read-only openers: how many of the first ``n`` units of ``seg`` are there in full.
        The writer (another process) may be copying the newest units right now, and a copy can
        land out of order, so the count stops before the first unit still zero; only units
        not checked by an earlier call are looked at."""
        base, seen = self._copied_upto
        start = seen if base == seg.base_offset and seen <= n else 0
        zero = np.flatnonzero(_units(seg, start, n - start)["size"] == 0)
        n = start + int(zero[0]) if len(zero) else n
        self._copied_upto = (seg.base_offset, n)
        return n

    def _reset_min(self) -> None:
        first = self.segments.first()
        if first is None:
            self.min_unit = 0
            return
        base_unit = first.base_offset // UNIT_SIZE
        n = first.committed // UNIT_SIZE
        i = 0
        mm = first.mm
        while i < n and UNIT.unpack_from(mm, HEADER_AREA + i * UNIT_SIZE)[1] == BLANK_SIZE:
            i += 1
        self.min_unit = max(self.min_unit, base_unit + i) if self.min_unit else base_unit + i

    def _update_phys_end(self) -> None:
        n = self.max_offset()
        if n > self.min_offset():
            off, size, _t = self.unit(n - 1)
            self.max_phys_end = off + size
        else:
            self.max_phys_end = 0

    # ------------------------------------------------------------------ offsets

    def min_offset(self) -> int:
        return self.min_unit

    def max_offset(self) -> int:
        """The next queue offset to be written."""
        last = self.segments.last()
        if last is None:
            return self.min_unit
        return last.base_offset // UNIT_SIZE + last.committed // UNIT_SIZE

    def unit(self, n: int) -> tuple[int, int, int]:
        seg = self.segments.find(n * UNIT_SIZE)
        return UNIT.unpack_from(seg.mm, HEADER_AREA + n * UNIT_SIZE - seg.base_offset)

    def file_end_unit(self, n: int) -> int:
        """First unit after the file that holds unit ``n``."""
        return (n // self.units_per_file + 1) * self.units_per_file

    def read_units(self, start: int, max_units: int, *, copy: bool = True) -> np.ndarray:
        """Up to ``max_units`` units from ``start``, within one file, as numpy: a copy, or with
        ``copy=False`` a view of the file's map (which pins the map: drop it before close)."""
        seg = self.segments.find(start * UNIT_SIZE)
        if seg is None:
            return np.empty(0, UNIT_DTYPE)
        first = start - seg.base_offset // UNIT_SIZE
        avail = seg.committed // UNIT_SIZE - first
        n = max(0, min(max_units, avail))
        units = _units(seg, first, n)
        return _copy_units(units) if copy else units

    def unit_span(self, start: int, max_units: int) -> tuple[MappedSegment, int, int] | None:
        """Where up to ``max_units`` units from ``start`` lie within one file, for a compiled
        reader that reads them in the file's map (``get_columns``): (the file, unit
        ``start``'s byte position in its map, how many units); None if no file holds it."""
        seg = self.segments.find(start * UNIT_SIZE)
        if seg is None:
            return None
        first = start - seg.base_offset // UNIT_SIZE
        n = max(0, min(max_units, seg.committed // UNIT_SIZE - first))
        return seg, HEADER_AREA + first * UNIT_SIZE, n

    def read_unit_bytes(self, start: int, max_units: int) -> np.ndarray:
        """``read_units``' copy as plain bytes (uint8, ``UNIT_SIZE`` a unit): for a compiled
        reader that parses the units itself (``get_columns``), without numpy's structured
        views."""
        got = self.unit_span(start, max_units)
        if got is None:
            return np.empty(0, np.uint8)
        seg, at, n = got
        return np.frombuffer(seg.mm, np.uint8, n * UNIT_SIZE, at).copy()

    def data_end(self, n0: int, most: int) -> int:
        """One past the last unit in ``[n0, n0 + most)`` that holds any non-zero byte (``n0``
        if none)."""
        found = n0
        for seg in self.segments.segments:
            first = seg.base_offset // UNIT_SIZE
            lo, hi = max(n0, first), min(n0 + most, first + seg.data_size // UNIT_SIZE)
            if hi <= lo:
                continue
            words = np.frombuffer(seg.mm, "<u4", (hi - lo) * UNIT_SIZE // 4,
                                  HEADER_AREA + (lo - first) * UNIT_SIZE)
            words = words.reshape(-1, UNIT_SIZE // 4)
            used = np.flatnonzero(words.any(axis=1))
            del words
            if len(used):
                found = lo + int(used[-1]) + 1
        return found

    def rewrite_unit(self, n: int, phys: int, size: int, tag: int) -> bool:
        """Overwrite unit ``n`` in place and msync it (recovery's repair of one unit); False if
        no file holds unit ``n``."""
        unit = self.segments.find(n * UNIT_SIZE)
        if unit is None:
            return False
        at = HEADER_AREA + n * UNIT_SIZE - unit.base_offset
        UNIT.pack_into(unit.mm, at, phys, size, tag)
        unit.file_ops.msync(unit.path, unit.mm, at, UNIT_SIZE)
        return True

    def commitlog_offsets_at(self, offsets: np.ndarray) -> np.ndarray:
        """The commit-log offset of the unit at each of ``offsets`` (queue offsets), read
        straight from the files; 0 for a blank unit or one no file holds."""
        offsets = np.asarray(offsets, np.int64)
        out = np.zeros(len(offsets), np.int64)
        files = offsets // self.units_per_file
        for f in np.unique(files).tolist():
            seg = self.segments.find(f * self.units_per_file * UNIT_SIZE)
            if seg is None:
                continue
            rows = np.flatnonzero(files == f)
            at = offsets[rows] - seg.base_offset // UNIT_SIZE
            held = seg.committed // UNIT_SIZE
            inside = (at >= 0) & (at < held)
            out[rows[inside]] = _units(seg, 0, held)["offset"][at[inside]]
        return out

    # ------------------------------------------------------------------ writes

    def _segment_for_append(self, n: int) -> MappedSegment:
        byte = n * UNIT_SIZE
        last = self.segments.last()
        if last is not None and last.base_offset <= byte < last.end_offset:
            return last
        base = byte - byte % self.file_bytes
        if last is not None and base != last.end_offset:
            log.warning("consume queue %s/%d: jumping from %d to unit %d", self.topic,
                        self.queue_id, self.max_offset(), n)
        with self._files_lock:
            seg = self.segments.new_segment(base)
        if last is None and self.max_offset() < n:
            self.min_unit = n
        return seg

    def reserve(self, first: int, end: int) -> None:
        """Make sure the files that units ``first .. end - 1`` go to exist or are prepared
        (DiskFullError if the disk has no room), before the records they will point at are
        acknowledged: dispatch then never needs a file it cannot make."""
        last = self.segments.last()
        lo, hi = first * UNIT_SIZE, end * UNIT_SIZE
        if hi <= lo:
            return
        if last is not None and last.base_offset <= lo and hi <= last.end_offset:
            last.reserve(hi - last.base_offset)   # files are sparse: their blocks too
            return
        base = lo - lo % self.file_bytes
        with self._files_lock:   # not while dispatch is taking a file into the queue
            while base < hi:
                upto = min(hi, base + self.file_bytes) - base
                seg = self.segments.find(base)
                if seg is None:
                    self.segments.allocator.prepare(base, upto)
                else:
                    seg.reserve(upto)
                base += self.file_bytes

    def put_batch(self, units: list[tuple[int, int, int, int]]) -> int:
        """Append ``(queue_offset, commitlog_offset, size, tag_hash)`` units in order.

        Units already present (queue offset below max) are skipped; a gap before the first unit
        of a new file is filled with blank units. Returns how many were written.
        """
        written = 0
        pack = UNIT.pack_into
        expected = self.max_offset()
        seg = None
        for qoff, phys, size, tag in units:
            if qoff < expected:
                continue
            if seg is None or not (seg.base_offset <= qoff * UNIT_SIZE < seg.end_offset):
                if seg is not None:
                    seg.committed = seg.wrote
                seg = self._segment_for_append(qoff)
            if qoff > expected:
                self._fill_blank(seg, expected, qoff)
            pos = qoff * UNIT_SIZE - seg.base_offset
            if pos + UNIT_SIZE > seg.reserved:
                seg.reserve(pos + UNIT_SIZE)
            pack(seg.mm, HEADER_AREA + pos, phys, size, tag)
            seg.wrote = pos + UNIT_SIZE
            expected = qoff + 1
            self.max_phys_end = phys + size
            written += 1
        if seg is not None:
            seg.committed = seg.wrote
        return written

    def put_units(self, queue_offsets: np.ndarray, units: np.ndarray) -> int:
        """``put_batch`` for ready units (UNIT_DTYPE) at ``queue_offsets`` (ascending): a run
        of consecutive offsets is written a file at a time in one slice. Returns units
        written."""
        expected = self.max_offset()
        n = len(queue_offsets)
        if n == 0 or int(queue_offsets[-1]) < expected:
            return 0
        first = int(np.searchsorted(queue_offsets, expected))  # skip what is there already
        qo = queue_offsets[first:]
        units = units[first:]
        if int(qo[-1]) - int(qo[0]) != len(qo) - 1:  # not one run: unit by unit
            return self.put_batch(list(zip(qo.tolist(), units["offset"].tolist(),
                                           units["size"].tolist(), units["tag"].tolist())))
        q, done = int(qo[0]), 0
        while done < len(units):
            seg = self._segment_for_append(q)
            if q > expected:
                self._fill_blank(seg, expected, q)
            pos = q * UNIT_SIZE - seg.base_offset
            k = min(len(units) - done, (seg.data_size - pos) // UNIT_SIZE)
            seg.reserve(pos + k * UNIT_SIZE)
            seg.mm[HEADER_AREA + pos:HEADER_AREA + pos + k * UNIT_SIZE] = \
                units[done:done + k].tobytes()
            seg.wrote = seg.committed = pos + k * UNIT_SIZE
            done += k
            q += k
            expected = q
        last = units[-1]
        self.max_phys_end = int(last["offset"]) + int(last["size"])
        return len(units)

    def append_run(self, first: int, data: memoryview, phys_end: int) -> bool:
        """Dispatch's fast path: ready units' bytes ``data`` (consecutive queue offsets from
        ``first``) copied in one slice, if they go exactly at the end of the newest file and
        fit in it; ``phys_end`` is the commit-log end of the last one's record. False (nothing
        written) otherwise: a replay, a gap or a new file is ``put_units``' case."""
        segs = self.segments.segments
        if not segs:
            return False
        seg = segs[-1]
        pos = first * UNIT_SIZE - seg.base_offset
        end = pos + len(data)
        if pos != seg.committed or pos != seg.wrote or end > seg.data_size:
            return False
        if end > seg.reserved or not seg.footer_reserved:
            seg.reserve(end)
        seg.mm[HEADER_AREA + pos:HEADER_AREA + end] = data
        seg.wrote = seg.committed = end   # after the bytes: readers stop at a unit not there
        self.max_phys_end = phys_end
        return True

    def _fill_blank(self, seg: MappedSegment, frm: int, to: int) -> None:
        """Blank units for queue offsets [frm, to) that fall in ``seg``."""
        start = max(frm * UNIT_SIZE, seg.base_offset) - seg.base_offset
        end = to * UNIT_SIZE - seg.base_offset
        seg.reserve(end)
        seg.mm[HEADER_AREA + start:HEADER_AREA + end] = BLANK_UNIT * ((end - start) // UNIT_SIZE)
        seg.wrote = end

    def truncate_by_phys(self, phys_end: int) -> int:
        """Drop every unit whose record starts at or after ``phys_end``; returns units dropped."""
        before = self.max_offset()
        lo, hi = self.min_unit, before
        while lo < hi:  # first unit with offset >= phys_end (units are in log order)
            mid = (lo + hi) // 2
            m, unit = self._next_real(mid, hi)
            if unit is None or unit[1] == 0 or unit[0] >= phys_end:
                hi = mid
            else:
                lo = m + 1
        if lo >= before:
            return 0
        return self.truncate_units(lo)

    def correct_min_offset(self, min_phys: int) -> None:
        """After the commit log lost its head: the first unit whose record still exists."""
        lo, hi = self.min_unit, self.max_offset()
        first = self.segments.first()
        if first is not None:   # files may have been deleted below the old minimum
            lo = max(lo, first.base_offset // UNIT_SIZE)
        end = hi
        while lo < hi:
            mid = (lo + hi) // 2
            m, unit = self._next_real(mid, hi)
            if unit is None or unit[0] >= min_phys:
                hi = mid
            else:
                lo = m + 1
        self.min_unit = self._next_real(lo, end)[0]   # a queue starts at a real unit

    def _next_real(self, n: int, hi: int) -> tuple[int, tuple[int, int, int] | None]:
        """The first unit at or after ``n`` and below ``hi`` that is not a blank unit, as
        (number, unit); (hi, None) if there is none.

        Blank units stand at a queue's start (retention) and at the offsets of prepared or
        rolled-back transactional records, so they can sit between real units: a binary search
        over units must judge a blank by the real unit after it, or it is not monotone.
        """
        if n < hi:
            unit = self.unit(n)
            if unit[1] != BLANK_SIZE:      # the common case: one unit read
                return n, unit
            n += 1
        while n < hi:
            units = self.read_units(n, min(hi - n, 4096))
            if len(units) == 0:
                return hi, None
            real = np.flatnonzero(units["size"] != BLANK_SIZE)
            if len(real):
                i = int(real[0])
                return n + i, tuple(int(x) for x in units[i].tolist())
            n += len(units)
        return hi, None

    def delete_files_below(self, min_phys: int) -> int:
        """Delete files whose last unit points below ``min_phys`` (never the newest)."""
        n = 0
        segs = self.segments.segments
        while len(segs) > 1:
            seg = segs[0]
            last_unit = seg.committed // UNIT_SIZE - 1
            if last_unit < 0:
                break
            off, size, _t = UNIT.unpack_from(seg.mm, HEADER_AREA + last_unit * UNIT_SIZE)
            if off + size > min_phys and size != BLANK_SIZE:
                break
            self.segments.delete_first()
            n += 1
        self.correct_min_offset(min_phys)
        return n

    def flush(self) -> None:
        for seg in self.segments.segments:
            if seg.flushed < seg.committed:
                try:
                    seg.flush()
                except ValueError:
                    pass

    def disk_bytes(self) -> int:
        return sum(s.path.stat().st_size for s in self.segments.segments if s.path.exists())

    def close(self) -> None:
        self.segments.close()

    def destroy(self) -> None:
        if self.segments.allocator is not None:
            self.segments.allocator.cancel()   # files reserve() prepared
        for seg in list(self.segments.segments):
            seg.destroy()
        self.segments.segments.clear()
        self.segments._bases.clear()
