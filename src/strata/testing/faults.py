"""A fault-injecting file layer for tests, in the spirit of LevelDB's FaultInjectionTestEnv.

``FaultInjectingFileOps`` records which byte ranges of which files were made durable; after the
store is abandoned (an in-process crash), ``power_loss()`` zeroes every byte that was never
synced, which is what a preallocated file looks like after the page cache is lost. It can also
refuse allocations and small files' writes to simulate a full disk (deleting a file gives its
bytes back). ``installed(ops)`` makes a layer the one ``strata.files.io.file_ops()`` answers,
for the code that is not handed a FileOps (the key index, the ref store, the Spark sink...).
``RecordingFileOps`` notes the order of syncs and renames. The module-level helpers edit files
offline: flip a bit, tear a write, zero a tail.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TypeVar

from strata.errors import DiskFullError
from strata.files import io
from strata.files.io import PAGE, FileOps

OpsT = TypeVar("OpsT", bound=FileOps)


@contextmanager
def installed(ops: OpsT) -> Iterator[OpsT]:
    """Within the block, code that asks the seam (``strata.files.io.file_ops()``) gets
    ``ops``; the previous answer is back afterwards, also when the block raises."""
    io.install(ops)
    try:
        yield ops
    finally:
        io.uninstall(ops)


class RecordingFileOps(FileOps):
    """Plain FileOps that notes ``("fsync", path)``, ``("fsync_dir", dir)`` and
    ``("rename", dst)`` in ``events``, in order (durability-order tests), and raises
    ``fail_at[kind]`` (an exception instance) at the ``kind`` event's ``fail_nth`` call."""

    def __init__(self, fail: dict[str, tuple[int, BaseException]] | None = None) -> None:
        self.events: list[tuple[str, str]] = []
        self._fail = dict(fail or {})
        self._counts: dict[str, int] = {}

    def _note(self, kind: str, what) -> None:
        self.events.append((kind, str(what)))
        n = self._counts[kind] = self._counts.get(kind, 0) + 1
        at = self._fail.get(kind)
        if at is not None and at[0] == n:
            raise at[1]

    def fsync(self, path: Path, fd: int) -> None:
        self._note("fsync", path)
        super().fsync(path, fd)

    def fdatasync(self, path: Path, fd: int) -> None:
        self._note("fdatasync", path)
        super().fdatasync(path, fd)

    def fsync_dir(self, directory: Path) -> None:
        self._note("fsync_dir", directory)
        super().fsync_dir(directory)

    def replace(self, src: Path, dst: Path) -> None:
        self._note("rename", dst)
        super().replace(src, dst)

    def fallocate(self, fd: int, offset: int, length: int, path: Path) -> None:
        self._note("fallocate", path)
        super().fallocate(fd, offset, length, path)


class FaultInjectingFileOps(FileOps):
    """FileOps that remembers synced ranges and can lose the rest, or run out of space."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.synced: dict[Path, list[tuple[int, int]]] = {}
        self.space_left: int | None = None  # None = unlimited
        self.allocated: dict[Path, list[tuple[int, int]]] = {}   # sparse files' reserved ranges
        self.syncs = 0

    # ------------------------------------------------------------------ recording

    def fallocate(self, fd: int, offset: int, length: int, path: Path) -> None:
        """Blocks reserved as a file is made or grows: only bytes not reserved before count as
        new space, as on a real disk; past ``space_left`` it is ENOSPC, as the OS says it."""
        with self._lock:
            have = self.allocated.get(Path(path), [])
            grown = _merge(have + [(offset, offset + length)], 1 << 62)
            new = sum(b - a for a, b in grown) - sum(b - a for a, b in _merge(have, 1 << 62))
            if self.space_left is not None:
                if new > self.space_left:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
                self.space_left -= new
            self.allocated[Path(path)] = grown
        super().fallocate(fd, offset, length, path)

    def allocate(self, fd: int, size: int, path: Path) -> None:
        with self._lock:
            self.allocated[Path(path)] = []     # a new file: nothing of it is reserved yet
        super().allocate(fd, size, path)
        with self._lock:
            self.synced[Path(path)] = []

    def create_sparse(self, path: Path, size: int, reserve: list[tuple[int, int]]) -> int:
        with self._lock:
            self.allocated[Path(path)] = []
        fd = super().create_sparse(path, size, reserve)
        with self._lock:
            self.synced[Path(path)] = []
        return fd

    def reserve(self, fd: int, size: int, path: Path) -> None:
        """A small file's bytes (checkpoint, abort marker, config files) need room too."""
        with self._lock:
            if self.space_left is not None:
                if size > self.space_left:
                    raise DiskFullError(errno.ENOSPC, f"no space left to write {path}")
                self.space_left -= size

    def msync(self, path: Path, mm: mmap.mmap, start: int, length: int,
              fd: int | None = None) -> None:
        super().msync(path, mm, start, length, fd)
        with self._lock:
            self.syncs += 1
            self.synced.setdefault(Path(path), []).append((start, start + length))

    def replace(self, src: Path, dst: Path) -> None:
        super().replace(src, dst)
        with self._lock:
            if Path(src) in self.synced:
                self.synced[Path(dst)] = self.synced.pop(Path(src))
            if Path(src) in self.allocated:
                self.allocated[Path(dst)] = self.allocated.pop(Path(src))

    def remove(self, path: Path) -> None:
        try:
            st = os.stat(path)
            size = min(st.st_size, st.st_blocks * 512)   # a sparse file gives back its blocks
        except OSError:
            size = 0
        super().remove(path)
        with self._lock:
            self.synced.pop(Path(path), None)
            self.allocated.pop(Path(path), None)
            if self.space_left is not None:
                self.space_left += size   # deleting files makes room, as on a real disk

    # ------------------------------------------------------------------ faults

    def fill_disk(self, bytes_left: int = 0) -> None:
        """From now on, allocations beyond ``bytes_left`` fail with ENOSPC."""
        self.space_left = bytes_left

    def free_disk(self) -> None:
        self.space_left = None

    def power_loss(self) -> dict[Path, int]:
        """Zero every never-synced byte of every tracked file; returns bytes lost per file.

        Call only after the store has been abandoned (its mappings closed).
        """
        lost: dict[Path, int] = {}
        with self._lock:
            tracked = dict(self.synced)
        for path, ranges in tracked.items():
            if not path.exists():
                continue
            size = path.stat().st_size
            keep = _merge(ranges, size)
            with open(path, "r+b") as f:
                pos = 0
                n = 0
                for a, b in keep + [(size, size)]:
                    if a > pos:
                        n += _zero_range(f, pos, a)
                    pos = max(pos, b)
            if n:
                lost[path] = n
        return lost


def _merge(ranges: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted((max(0, a), min(size, b)) for a, b in ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _zero_range(f, start: int, end: int) -> int:
    """Zero [start, end) of an open file, returning how many bytes were non-zero."""
    changed = 0
    pos = start
    while pos < end:
        n = min(1 << 20, end - pos)
        f.seek(pos)
        data = f.read(n)
        if data.count(0) != len(data):
            changed += len(data) - data.count(0)
            f.seek(pos)
            f.write(bytes(len(data)))
        pos += n
    return changed


# ---------------------------------------------------------------------- offline edits


def flip_bit(path: Path, file_offset: int, bit: int = 0) -> None:
    """Invert one bit of a file in place."""
    with open(path, "r+b") as f:
        f.seek(file_offset)
        b = f.read(1)
        f.seek(file_offset)
        f.write(bytes([b[0] ^ (1 << bit)]))
        f.flush()
        io.DEFAULT_FILE_OPS.fsync(path, f.fileno())


def zero_range(path: Path, start: int, end: int) -> None:
    """Overwrite [start, end) of a file with zeros (a zeroed tail, a torn write)."""
    with open(path, "r+b") as f:
        _zero_range(f, start, end)
        f.flush()
        io.DEFAULT_FILE_OPS.fsync(path, f.fileno())


def page_of(offset: int) -> int:
    return offset - offset % PAGE
