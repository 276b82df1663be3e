"""The checkpoint file, the abort marker and the live state page of a store directory."""

from __future__ import annotations

import logging
import mmap
import os
from pathlib import Path

import numpy as np

from strata.files.io import DEFAULT_FILE_OPS, FileOps, disk_full_or_same, file_ops
from strata.files.layout import ABORT_NAME, CHECKPOINT_NAME, STATE_NAME
from strata.format.checkpoint import (STATE_POS_CONFIRMED, STATE_POS_DISPATCHED, STATE_POS_MIN,
                                      Checkpoint, decode_state, encode_state)

log = logging.getLogger(__name__)

STATE_SIZE = 4096
_CONFIRMED, _DISPATCHED, _MIN = ((pos - STATE_POS_CONFIRMED) // 8 for pos in
                                 (STATE_POS_CONFIRMED, STATE_POS_DISPATCHED, STATE_POS_MIN))


class CheckpointFile:
    """``<dir>/checkpoint``, replaced atomically; a torn or missing one reads as empty."""

    def __init__(self, directory: Path, file_ops: FileOps = DEFAULT_FILE_OPS) -> None:
        self.path = Path(directory) / CHECKPOINT_NAME
        self.file_ops = file_ops
        self.last_written: Checkpoint | None = None

    def load(self) -> Checkpoint | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return Checkpoint.decode(raw)
        except ValueError as exc:
            log.warning("ignoring unreadable checkpoint %s: %s", self.path, exc)
            return None

    def store(self, cp: Checkpoint) -> None:
        if cp == self.last_written:
            return
        self.file_ops.write_atomic(self.path, cp.encode())
        self.last_written = cp


class AbortMarker:
    """``<dir>/abort`` exists while a writer has the store open: present at start = unclean stop."""

    def __init__(self, directory: Path, file_ops: FileOps = DEFAULT_FILE_OPS) -> None:
        self.path = Path(directory) / ABORT_NAME
        self.file_ops = file_ops

    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        self.file_ops.write_atomic(self.path, f"{os.getpid()}\n".encode())

    def remove(self) -> None:
        self.file_ops.remove(self.path)
        self.file_ops.fsync_dir(self.path.parent)


class StatePage:
    """``<dir>/state``: offsets the writer publishes to read-only openers in other processes.

    Not a durability record (it is never fsynced on the put path). The three offsets are
    stored and loaded through an int64 numpy view of the page, which is one aligned 8-byte
    store or load each (atomic), so a reader sees an old or a new value, never a torn one.
    ``struct.pack_into`` is no way to do it: CPython zero-fills the field and then writes it a
    byte at a time, and a reader in between saw a confirmed offset of 0 (its gets came back
    empty) or a mix of two values; ``unpack_from`` reads a byte at a time too.
    """

    def __init__(self, directory: Path, *, readonly: bool) -> None:
        self.path = Path(directory) / STATE_NAME
        self.readonly = readonly
        self.mm: mmap.mmap | None = None
        self._fd: int | None = None
        self._offsets: np.ndarray | None = None   # confirmed, dispatched, min: a view of mm

    @property
    def is_open(self) -> bool:
        """Whether the page is mapped (``open`` found or made it, ``close`` not yet called)."""
        return self.mm is not None

    def _map(self, fd: int, access: int) -> None:
        self._fd = fd
        self.mm = mmap.mmap(fd, STATE_SIZE, access=access)
        self._offsets = np.frombuffer(self.mm, dtype="<i8", count=3, offset=STATE_POS_CONFIRMED)

    def open(self, confirmed: int = 0, dispatched: int = 0, min_offset: int = 0) -> bool:
        """Map the page; the writer (re)initialises it. False if a reader finds none."""
        if self.readonly:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return False
            if os.fstat(fd).st_size < STATE_SIZE:
                os.close(fd)
                return False
            self._map(fd, mmap.ACCESS_READ)
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:   # blocks reserved, not a sparse page: a full disk is DiskFullError, not SIGBUS
            file_ops().fallocate(fd, 0, STATE_SIZE, self.path)
        except OSError as exc:
            os.close(fd)
            raise disk_full_or_same(exc, f"no space left to create {self.path}")
        self._map(fd, mmap.ACCESS_WRITE)
        raw = encode_state(os.getpid(), confirmed, dispatched, min_offset)
        self.mm[:len(raw)] = raw
        return True

    def set_confirmed(self, offset: int) -> None:
        self._offsets[_CONFIRMED] = offset

    def set_dispatched(self, offset: int) -> None:
        self._offsets[_DISPATCHED] = offset

    def set_min(self, offset: int) -> None:
        self._offsets[_MIN] = offset

    def read(self) -> tuple[int, int, int, int]:
        """(writer pid, confirmed offset, dispatched offset, min offset)."""
        pid = decode_state(self.mm)[0]   # checks the magic too
        confirmed, dispatched, min_offset = (int(v) for v in self._offsets)
        return pid, confirmed, dispatched, min_offset

    def close(self) -> None:
        self._offsets = None   # the view pins the map
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
