"""The key index: find the commit-log offsets of messages by ``topic#key``.

A directory of fixed-size, mmapped index files (layout in ``strata.format.key_index``), each
named by the commit-log offset of its first entry. An entry is appended for every key of every
message, in commit-log order; it becomes the head of its hash slot and links to the previous
head, so a slot's chain runs newest to oldest. A query walks the chain of the key's slot in each
file, newest file first, and yields every offset whose 32-bit hash and coarse time match. It
never compares keys: the caller reads each candidate record and checks the real topic, key and
timestamp (two keys with the same hash must never return each other's messages).

One writer per directory (the store's dispatch thread); any number of read-only views, in this
or other processes, see a batch once its header counters are written.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from crc32c import crc32c

from strata.errors import (CorruptStoreError, DiskFullError, InvalidConfigError,
                           InvalidInputError, ReadOnlyStoreError, StoreClosedError)
from strata.files.io import file_ops
from strata.format import key_index as fmt
from strata.format.derived import IndexFileEnd
# The file map and the recovery side live in their own modules; re-exported here.
from strata.index.key_index_file import SPARE_NAME, _TMP_SUFFIX, _IndexFile  # noqa: F401
from strata.index.key_index_lookup import KeyIndexLookup
from strata.index.key_index_repair import (  # noqa: F401
    DAMAGED_SUFFIX, NEWEST_SCAN_CHUNK, KeyIndexRepair, _chain_problem, _newest_in_slots,
    _Repair, _zero)

log = logging.getLogger(__name__)

DEFAULT_SLOTS = 5_000_000
DEFAULT_ENTRIES = 20_000_000
# Files start small and grow: the first has at most FIRST_SLOTS slots and FIRST_ENTRIES entries
# (about 340 KB), each next one GROWTH times its predecessor's, up to the configured geometry
# (every file's header holds its own geometry; readers take it from there).
FIRST_SLOTS = 4096
FIRST_ENTRIES = 16384
GROWTH = 4

_ENTRY = fmt.ENTRY
_SLOT = fmt.SLOT
_HASH_MASK = fmt.HASH_MASK
_DELTA_MIN = fmt.DELTA_MIN
_DELTA_MAX = fmt.DELTA_MAX
_NOT_MONO = fmt.FLAG_TIMES_NOT_MONOTONE
_SEALED = fmt.FLAG_SEALED
_SLOTS_AT = fmt.HEADER_BYTES
assert fmt.ENTRY_BYTES == 20 and fmt.SLOT_BYTES == 4   # hard-coded in the hot loops


def _validate_geometry(slots: object, entries: object) -> None:
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= fmt.MAX_SLOTS:
        raise InvalidConfigError(f"key index slots must be an int in 1..{fmt.MAX_SLOTS}, "
                                 f"got {slots!r}")
    if (not isinstance(entries, int) or isinstance(entries, bool)
            or not 2 <= entries <= fmt.MAX_ENTRIES):
        raise InvalidConfigError(f"key index entries must be an int in 2..{fmt.MAX_ENTRIES} "
                                 f"(entry 0 is never used), got {entries!r}")


class KeyIndex(KeyIndexLookup, KeyIndexRepair):
    """Hash-slot key index over the commit log: ``topic#key`` → candidate physical offsets."""

    def __init__(self, directory: str | Path, *, slots: int = DEFAULT_SLOTS,
                 entries: int = DEFAULT_ENTRIES, hash_fn: Callable[[str], int] | None = None,
                 readonly: bool = False) -> None:
        _validate_geometry(slots, entries)
        if hash_fn is not None and not callable(hash_fn):
            raise InvalidConfigError(f"hash_fn must be callable, got {hash_fn!r}")
        self.directory = Path(directory)
        self.slots = slots
        self.entries = entries
        self.readonly = readonly
        self._hash = hash_fn if hash_fn is not None else fmt.key_hash
        self._lock = threading.Lock()
        self._files: list[_IndexFile] = []
        self._spare: Path | None = None      # a reserved file the next _create takes
        self._closed = False
        self.repairs: list[_Repair] = []
        self.set_aside: list[str] = []      # unusable files a writer's open set aside
        # The first commit-log offset whose entries opening lost (files set aside, entries
        # cut by a repair): the log must be re-dispatched into the index from there.
        self.damaged_from: int | None = None
        if readonly:
            self._rescan()
        else:
            if not self.directory.is_dir():
                self.directory.mkdir(parents=True)
                file_ops().fsync_dir(self.directory.parent)
            self._open_for_writing()

    # ------------------------------------------------------------------ opening

    def _map(self, path: Path, order: tuple[int, int]) -> _IndexFile:
        """Map and validate one file; CorruptStoreError naming it if its header is bad."""
        flags = os.O_RDONLY if self.readonly else os.O_RDWR
        fd = os.open(path, flags)
        try:
            st = os.fstat(fd)
            length = st.st_size
            try:
                if length < fmt.HEADER_BYTES:
                    raise ValueError(f"file is {length} bytes, shorter than a key index header")
                header = fmt.KeyIndexHeader.decode(os.pread(fd, fmt.HEADER_BYTES, 0))
                header.validate(length)
            except ValueError as exc:
                raise CorruptStoreError(f"key index file {path}: {exc}") from None
            if order[0] != header.begin_offset:
                raise CorruptStoreError(
                    f"key index file {path}: its name says offset {order[0]} but its header "
                    f"says {header.begin_offset}")
            access = mmap.ACCESS_READ if self.readonly else mmap.ACCESS_WRITE
            mm = mmap.mmap(fd, length, access=access)
        finally:
            os.close(fd)
        return _IndexFile(path, mm, header, order, st.st_ino)

    def _listing(self) -> list[tuple[tuple[int, int], str, int]]:
        """(order, name, inode) of every index file in the directory, oldest first."""
        found = []
        try:
            with os.scandir(self.directory) as it:
                for e in it:
                    order = fmt.parse_file_name(e.name)
                    if order is not None:
                        found.append((order, e.name, e.inode()))
        except FileNotFoundError:
            return []
        found.sort()
        return found

    def _rescan(self) -> None:
        """Readonly: follow the writer's files (new, deleted, replaced) without locks."""
        current = {(f.name, f.inode): f for f in self._files}
        files = []
        for order, name, ino in self._listing():
            f = current.get((name, ino))
            if f is None:
                try:
                    f = self._map(self.directory / name, order)
                except FileNotFoundError:
                    continue                    # deleted by the writer meanwhile
                except CorruptStoreError as exc:  # the writer's next open rebuilds it
                    log.warning("key index: skipping %s", exc)
                    continue
            files.append(f)
        if files != self._files:
            self._drop_table()
        self._files = files                     # dropped maps unmap when no walk holds them

    # ------------------------------------------------------------------ writing

    def _create(self, begin_offset: int, base_ts: int) -> _IndexFile:
        """Create, reserve and map the next file; DiskFullError leaves nothing behind."""
        seq = 0
        if self._files and self._files[-1].begin_offset == begin_offset:
            seq = self._files[-1].order[1] + 1
        name = fmt.file_name(begin_offset, seq)
        path = self.directory / name
        tmp = self.directory / (name + _TMP_SUFFIX)
        slots, entries = self._next_geometry()
        size = fmt.file_size(slots, entries)
        header = fmt.KeyIndexHeader(slots=slots, entries=entries,
                                    begin_offset=begin_offset, base_timestamp=base_ts)
        spare, self._spare = self._spare, None
        ops = file_ops()
        if spare is not None:
            try:
                if os.stat(spare).st_size == size:   # blocks already reserved: no new space
                    ops.replace(spare, tmp)
                else:
                    ops.remove(spare)
            except FileNotFoundError:
                pass
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                ops.fallocate(fd, 0, size, tmp)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFullError(
                        f"no space left to create key index file {path} ({size:,} bytes); "
                        "existing index files are intact") from exc
                raise
            os.pwrite(fd, header.encode(), 0)
            ops.fsync(tmp, fd)       # header and size durable before the name appears
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_WRITE)
            ops.rename(tmp, path)    # and the directory fsynced after it
            ino = os.fstat(fd).st_ino
        except BaseException:
            os.close(fd)
            ops.remove(tmp)
            raise
        os.close(fd)
        f = _IndexFile(path, mm, header, (begin_offset, seq), ino)
        f.dirty = True
        self._files.append(f)
        return f

    def _next_geometry(self) -> tuple[int, int]:
        """(slots, entries) of the next file: small first, GROWTH times the last file's after,
        never beyond the configured ``slots`` and ``entries``."""
        if not self._files:
            return min(self.slots, FIRST_SLOTS), min(self.entries, FIRST_ENTRIES)
        last = self._files[-1]
        return (min(self.slots, max(FIRST_SLOTS, last.slots * GROWTH)),
                min(self.entries, max(FIRST_ENTRIES, last.capacity * GROWTH)))

    def ensure_spare(self) -> None:
        """Once the index holds a file, keep the next file's space reserved (``next.spare``,
        zero-filled, taken by the next roll), so that a writer learns of a full disk before it
        acknowledges a put whose keys may need that roll: DiskFullError here, not in dispatch
        afterwards. Cheap when the spare is there."""
        if self._spare is not None or not self._files or self.readonly:
            return
        path = self.directory / SPARE_NAME
        size = fmt.file_size(*self._next_geometry())
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            file_ops().fallocate(fd, 0, size, path)
        except OSError as exc:
            os.close(fd)
            file_ops().remove(path)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(
                    exc.errno, f"no space left to reserve the next key index file {path} "
                    f"({size:,} bytes); existing index files are intact") from exc
            raise
        os.close(fd)
        with self._lock:
            if self._spare is None:
                self._spare = path

    def put_batch(self, items: Sequence[tuple[str, int, int]]) -> None:
        """Index ``(key, physical_offset, store_timestamp_ms)`` items in commit-log order.

        Items below ``indexed_end()`` are skipped (replay is harmless); all keys of one message
        must come in the same batch. A batch is all or nothing: if a new file cannot be created
        (disk full) the batch's entries are undone before DiskFullError is raised.
        """
        self._writable()
        with self._lock:
            start_end = self._end_locked()
            try:
                self._put_locked(items, start_end)
            except UnicodeEncodeError as exc:
                self._truncate_locked(start_end)
                raise InvalidInputError(f"key index key is not encodable as UTF-8: {exc}") from None
            except BaseException:
                self._truncate_locked(start_end)
                raise

    @property
    def hashes_keys_by_default(self) -> bool:
        """True when keys hash with ``key_index.key_hash`` (no ``hash_fn`` given): then the
        compiled dispatch reader's hashes are this index's (``put_hashed``)."""
        return self._hash is fmt.key_hash

    def put_hashed(self, hashes: np.ndarray, offsets: np.ndarray, timestamps: np.ndarray
                   ) -> None:
        """``put_batch`` of keys already hashed (31-bit ``key_hash`` of ``topic#key``, int64
        arrays in commit-log order): the entries written in compiled code
        (``property_kernels.put_entries``), a file at a time. Same entries, same all or
        nothing."""
        from strata.format import property_kernels as pk
        self._writable()
        with self._lock:
            start_end = self._end_locked()
            keep = offsets >= start_end
            if not keep.all():
                hashes, offsets, timestamps = hashes[keep], offsets[keep], timestamps[keep]
            n = len(hashes)
            if not n:
                return
            if n > 1 and (np.diff(offsets) < 0).any():
                raise InvalidInputError("key index items must come in commit-log order")
            try:
                k = 0
                f = self._files[-1] if self._files else None
                while k < n:
                    if f is None or f.count >= f.capacity:
                        if f is not None:
                            f.end_offset = int(offsets[k - 1]) if k else f.end_offset
                            f.store_counters()
                        f = self._create(int(offsets[k]), int(timestamps[k]))
                        f.count, f.used, f.min_d, f.max_d, f.last_d = 1, 0, 0, 0, 0
                        f.flags &= ~_NOT_MONO
                    state = np.array([f.count, f.used, f.min_d, f.max_d, f.last_d,
                                      1 if f.flags & _NOT_MONO else 0], np.int64)
                    first = k
                    k = pk.put_entries(np.frombuffer(f.mm, np.uint8), _SLOTS_AT, f.slots,
                                       f.entries_pos, f.base_ts, f.capacity, state, hashes,
                                       offsets, timestamps, k, _DELTA_MIN, _DELTA_MAX)
                    count, used, min_d, max_d, last_d, not_mono = state.tolist()
                    f.count, f.used, f.min_d, f.max_d, f.last_d = count, used, min_d, max_d, \
                        last_d
                    f.flags = (f.flags & ~_NOT_MONO) | (_NOT_MONO if not_mono else 0)
                    if k > first and count > 1:
                        f.end_offset = int(offsets[k - 1])
                    f.store_counters()
                    f.dirty = True
            except BaseException:
                self._truncate_locked(start_end)
                raise

    def _put_locked(self, items: Sequence[tuple[str, int, int]], start_end: int) -> None:
        hash_fn = self._hash
        inline_crc = hash_fn is fmt.key_hash      # the default, inlined: saves a call per key
        crc = crc32c
        pack_entry = _ENTRY.pack_into
        pack_slot = _SLOT.pack                # stored by slice: one 4-byte store (format)
        read_slot = _SLOT.unpack_from
        mask, dmin, dmax, slots_at = _HASH_MASK, _DELTA_MIN, _DELTA_MAX, _SLOTS_AT
        f = self._files[-1] if self._files else None
        if f is not None:
            mm, slots, epos, cap, base = f.mm, f.slots, f.entries_pos, f.capacity, f.base_ts
            count, used, min_d, max_d, last_d = f.count, f.used, f.min_d, f.max_d, f.last_d
            not_mono = f.flags & _NOT_MONO
        else:
            count = cap = 0                     # forces a file on the first item
        last = start_end - 1
        try:
            for key, phys, ts in items:
                if phys < start_end:
                    continue
                if phys < last:
                    raise InvalidInputError(
                        f"key index items must come in commit-log order: offset {phys} "
                        f"follows {last}")
                if count >= cap:
                    if f is not None:
                        f.count, f.used, f.min_d, f.max_d, f.last_d = count, used, min_d, \
                            max_d, last_d
                        f.flags = (f.flags & ~_NOT_MONO) | not_mono
                        f.end_offset = last
                        f.store_counters()
                    f = self._create(phys, ts)
                    mm, slots, epos, cap, base = f.mm, f.slots, f.entries_pos, f.capacity, \
                        f.base_ts
                    count, used, min_d, max_d, last_d, not_mono = 1, 0, 0, 0, 0, 0
                h = (crc(key.encode()) if inline_crc else hash_fn(key)) & mask
                spos = slots_at + (h % slots) * 4
                head = read_slot(mm, spos)[0]
                d = (ts - base) // 1000
                if d != last_d:                 # most keys share their predecessor's second
                    if not dmin <= d <= dmax:
                        d = dmax if d > 0 else dmin
                    if d < last_d:
                        not_mono = _NOT_MONO
                        if d < min_d:
                            min_d = d
                    elif d > max_d:
                        max_d = d
                    last_d = d
                pack_entry(mm, epos + count * 20, h, phys, d, head)
                mm[spos:spos + 4] = pack_slot(count)
                if not head:
                    used += 1
                count += 1
                last = phys
        finally:
            if f is not None and count:
                f.count, f.used, f.min_d, f.max_d, f.last_d = count, used, min_d, max_d, last_d
                f.flags = (f.flags & ~_NOT_MONO) | not_mono
                if count > 1:
                    f.end_offset = _ENTRY.unpack_from(mm, epos + (count - 1) * 20)[1]
                f.store_counters()
                f.dirty = True

    # ------------------------------------------------------------------ reading

    def indexed_end(self) -> int:
        """One past the largest physical offset indexed (0 when nothing is)."""
        self._open()
        if self.readonly:
            self._rescan()
        with self._lock:
            return self._end_locked()

    def _end_locked(self) -> int:
        for f in reversed(self._files):
            _flags, end, count, _u, _a, _b = fmt.peek_counters(f.mm)
            if count > 1:
                return end + 1
        return 0

    def entries_between(self, start: int, end: int) -> list[tuple[str, int, int, np.ndarray]]:
        """Counted entries whose physical offset lies in ``[start, end)``, oldest file first,
        as ``(file name, base timestamp, number of the first entry, entries)``; ``entries`` is
        a copy with dtype ``ENTRY_DTYPE``. Used by verify to compare a stretch of the log with
        its index entries (entries are appended in offset order, so a stretch is contiguous)."""
        self._open()
        if self.readonly:
            self._rescan()
        out = []
        for f in list(self._files):
            _flags, end_offset, count, _u, _a, _b = fmt.peek_counters(f.mm)
            if count <= 1 or end_offset < start or f.begin_offset >= end:
                continue
            ents = np.frombuffer(f.mm, dtype=fmt.ENTRY_DTYPE, count=count,
                                 offset=f.entries_pos)[1:]
            offsets = ents["offset"]
            lo = int(np.searchsorted(offsets, start, side="left"))
            hi = int(np.searchsorted(offsets, end, side="left"))
            if hi > lo:
                out.append((f.name, f.base_ts, lo + 1, ents[lo:hi].copy()))
            del ents, offsets
        return out

    def files(self) -> list[dict]:
        """Per file, oldest first: name, path, entries used, capacity, slots, used slots,
        coarse begin/end store time (ms), begin/end physical offset, sealed."""
        self._open()
        if self.readonly:
            self._rescan()
        return [f.info() for f in list(self._files)]

    def layout(self) -> tuple[list[IndexFileEnd], int]:
        """([IndexFileEnd] of every file, oldest first; indexed end): what the derived-files
        summary records at a checkpoint."""
        with self._lock:
            files = [IndexFileEnd(f.begin_offset, f.order[1], f.end_offset)
                     for f in self._files if f.count > 1]
            return files, self._end_locked()

    # ------------------------------------------------------------------ retention
    def delete_files_below(self, min_physical_offset: int) -> int:
        """Retention: delete files whose newest entry is below ``min_physical_offset``, never
        the newest file; returns how many were deleted."""
        self._writable()
        with self._lock:
            doomed = [f for f in self._files[:-1] if f.end_offset < min_physical_offset]
            for f in doomed:
                self._files.remove(f)
                self._delete(f)
            return len(doomed)

    def _delete(self, f: _IndexFile) -> None:
        """Unlink a file. Its map is left to the garbage collector so a walk in another thread
        that still holds it finishes safely; readers in other processes keep their own maps.
        The lookup table's views go too, so that the map goes with the walks' last view."""
        self._drop_table()
        file_ops().remove(f.path)

    # ------------------------------------------------------------------ durability, life cycle

    def flush(self) -> None:
        """msync every file written since the last flush; a full file is then marked sealed."""
        if self.readonly or self._closed:
            return
        with self._lock:
            for f in self._files:
                if f.dirty:
                    f.dirty = False
                    f.mm.flush()
                # a full file is sealed once a newer one exists, also when its last flush came
                # while it was still the newest (it is not dirty since: its bytes are durable)
                if f.count >= f.capacity and not f.flags & _SEALED and f is not self._files[-1]:
                    f.flags |= _SEALED
                    f.store_counters()
                    f.mm.flush(0, min(mmap.PAGESIZE, len(f.mm)))

    def close(self) -> None:
        """Flush (writer) and unmap everything; further calls raise StoreClosedError."""
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._closed = True
            self._drop_table()
            for f in self._files:
                try:
                    f.mm.close()
                except BufferError:
                    pass                        # a numpy view still alive; GC unmaps it later
            self._files = []

    def __enter__(self) -> "KeyIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> None:
        if self._closed:
            raise StoreClosedError("the key index is closed")

    def _writable(self) -> None:
        self._open()
        if self.readonly:
            raise ReadOnlyStoreError(f"key index {self.directory} is open read-only")
