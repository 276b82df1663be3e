"""Length-and-CRC framed journals: one writer and one reader for every append-only log of
records strata keeps beside its data (the broker's consumer-group and held-message journals,
the tier's metadata log), in the manner of LevelDB's ``log_writer`` / ``log_reader``.

A journal is a header its owner chooses, then frames ``[u32 length][u32 crc32c][payload]``
(little-endian; the CRC covers the payload; docs/format.md, sections 13 "Broker state"
and 14 "Tier"). A crash mid-append leaves at most one torn frame at the end: the reader stops at
the first frame whose length or CRC does not hold, tells a *reporter* where and why, and the
writer cuts the file there before it appends again. What a payload means is the owner's
business; an owner that finds a whole frame it cannot decode calls ``reject`` and the journal
ends before that frame, like a torn one.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from pathlib import Path
from typing import Callable, Iterator

from crc32c import crc32c

from strata.files.io import FileOps, file_ops

log = logging.getLogger(__name__)

FRAME = struct.Struct("<II")          # payload length, crc32c(payload)
MAX_PAYLOAD = 64 << 20                # a longer length is damage, not a record

Reporter = Callable[[int, int, str], None]
"""Called as ``reporter(offset, dropped_bytes, reason)`` when the journal ends before its
last byte: the frames from ``offset`` on are not read (a torn tail, or damage)."""


def frame(payload: bytes) -> bytes:
    """One record as it is appended: ``[u32 length][u32 crc32c][payload]``."""
    return FRAME.pack(len(payload), crc32c(payload)) + payload


class JournalReader:
    """The whole frames of ``data`` from byte ``start``: iterate for their payloads; ``end``
    is then where the last whole (and accepted) frame ends.

    ``allow_empty``: a zero-length frame is a record (else it ends the journal, as a run of
    zeros in a torn tail does)."""

    def __init__(self, data: bytes, start: int, reporter: Reporter | None = None, *,
                 max_payload: int = MAX_PAYLOAD, allow_empty: bool = False) -> None:
        self.data = data
        self.start = self.end = start
        self.reporter = reporter
        self.max_payload = max_payload
        self.allow_empty = allow_empty
        self._last = start       # where the frame handed out last begins

    def __iter__(self) -> Iterator[bytes]:
        data, pos, size = self.data, self.start, len(self.data)
        while True:
            self.end = pos
            if pos + FRAME.size > size:
                if pos < size:
                    self._report(pos, "a frame header cut short")
                return
            length, crc = FRAME.unpack_from(data, pos)
            begin = pos + FRAME.size
            if (length == 0 and not self.allow_empty) or length > self.max_payload:
                self._report(pos, f"a frame length of {length}")
                return
            if begin + length > size:
                self._report(pos, f"a frame of {length} bytes cut short")
                return
            payload = data[begin:begin + length]
            if crc32c(payload) != crc:
                self._report(pos, "a frame whose CRC32C does not match")
                return
            self._last = pos
            yield payload
            pos = begin + length

    def reject(self, reason: str) -> None:
        """The payload handed out last does not decode: the journal ends before its frame.
        Call it and stop iterating."""
        self.end = self._last
        self._report(self._last, reason)

    @property
    def dropped(self) -> int:
        """Bytes after ``end`` (after iterating)."""
        return len(self.data) - self.end

    def _report(self, pos: int, reason: str) -> None:
        if self.reporter is not None:
            self.reporter(pos, len(self.data) - pos, reason)


class JournalWriter:
    """Appends frames to one journal file through the file seam.

    ``append`` adds whole frames with one ``write`` on an ``O_APPEND`` descriptor, so a
    process crash loses none of them; ``sync=True`` (or a later ``sync``) fsyncs them. A write
    cut short (a full disk) is taken back before the error is raised, so no torn frame stands
    between the good ones and those appended after it; if it cannot be taken back, appends
    are refused until it can. ``rewrite`` replaces the whole file atomically (compaction).

    ``keep_open``: hold the descriptor between appends (the broker, which appends often);
    otherwise each append opens and closes it (the tier's metadata, once per upload round).
    Appends and rewrites may come from several threads (``_write_lock``); ``sync`` may run on
    another thread while a rewrite waits (``_fd_lock``: a rewrite never closes the descriptor
    a sync is about to fsync)."""

    def __init__(self, path: Path, ops: FileOps | None = None, *,
                 keep_open: bool = True) -> None:
        self.path = Path(path)
        self.file_ops = ops or file_ops()
        self.keep_open = keep_open
        self.size = 0
        self._fd: int | None = None
        self._fd_lock = threading.Lock()      # held by sync, rewrite and close
        self._write_lock = threading.Lock()   # held by append and rewrite
        self._torn = False                    # an append was cut short and not taken back

    def create(self, header: bytes) -> None:
        """A new journal holding only ``header`` (written whole, atomically)."""
        self.file_ops.write_atomic(self.path, header)

    def start(self, end: int, file_size: int) -> None:
        """Append from ``end`` on: a torn tail past it (``file_size`` > ``end``) is cut off
        and the cut made durable first."""
        if file_size > end:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, end)
                self.file_ops.fsync(self.path, fd)
            finally:
                os.close(fd)
        self.size = end
        if self.keep_open:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)

    def append(self, data: bytes, *, sync: bool = False) -> None:
        """Append whole frames (``frame(...)`` joined); fsync them too with ``sync``."""
        if not data:
            return
        with self._write_lock:
            fd = self._fd if self._fd is not None else \
                os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                if self._torn:
                    self._untear(fd)
                view = memoryview(data)
                try:
                    while view:
                        n = self.file_ops.write(self.path, fd, view)
                        view = view[n:]
                    if sync:
                        self.file_ops.fsync(self.path, fd)
                except BaseException:
                    self._torn = True
                    try:
                        self._untear(fd)
                    except OSError:
                        log.exception("%s: a record cut short at offset %d could not be taken "
                                      "back; appends wait until it can", self.path, self.size)
                    raise
                self.size += len(data)
            finally:
                if fd is not self._fd:
                    os.close(fd)

    def _untear(self, fd: int) -> None:
        os.ftruncate(fd, self.size)
        self._torn = False

    def sync(self) -> None:
        """fsync what was appended (from any thread; a rewrite waits for it)."""
        with self._fd_lock:
            if self._fd is not None:
                self.file_ops.fsync(self.path, self._fd)

    def rewrite(self, data: bytes) -> None:
        """Replace the journal with ``data`` (a header and frames), atomically. If the new
        file cannot be written (a full disk) the old one stays, open for appends, and the
        error is raised."""
        with self._write_lock, self._fd_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            try:
                self.file_ops.write_atomic(self.path, data)
            except BaseException:
                if self.keep_open:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                raise
            if self.keep_open:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            self.size = len(data)
            self._torn = False

    def close(self) -> None:
        with self._write_lock, self._fd_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
