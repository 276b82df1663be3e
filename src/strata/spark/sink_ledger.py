"""The streaming sink's ledger: which micro-batches of one sink were started, and where.

    <store>/spark-sinks/<sink id>/ledger                 48-byte entries, append only
    <store>/spark-sinks/<sink id>/sink.json              checkpoint location and query id (informational)
    <store>/spark-sinks/<sink id>/batch-<20 digits>/     the batch's rows until they are durable in the log

An entry is written and fsynced *before* the batch's messages are appended (an intent); whether
the append happened is read back from the commit log itself (stream_write.py). Layout in
docs/format.md section 12.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from strata.errors import CorruptStoreError
from strata.files.io import file_ops, fsync_dir

SINKS_DIR = "spark-sinks"
ENTRY = struct.Struct("<4sIqqqqq")  # magic, crc32c(bytes 8..48), batch, start, first, rows, born
ENTRY_SIZE = ENTRY.size  # 48
MAGIC = b"SKB1"
_READ_ENTRIES = 1024  # entries read per step when searching backwards


@dataclass(frozen=True)
class LedgerEntry:
    """One attempt at appending micro-batch ``batch_id``: its rows ``first_row..rows-1`` were
    to be appended from commit-log offset ``start_offset``, each born at ``born_ts`` (ms)."""
    batch_id: int
    start_offset: int
    first_row: int
    rows: int
    born_ts: int


def encode_entry(e: LedgerEntry) -> bytes:
    rest = struct.pack("<qqqqq", e.batch_id, e.start_offset, e.first_row, e.rows, e.born_ts)
    return ENTRY.pack(MAGIC, crc32c(rest), e.batch_id, e.start_offset, e.first_row, e.rows,
                      e.born_ts)


def decode_entry(buf: bytes, at: int = 0) -> LedgerEntry | None:
    """The entry at ``at``, or None if it is not a whole, checksummed entry."""
    if len(buf) - at < ENTRY_SIZE:
        return None
    magic, crc, b, s, f, n, born = ENTRY.unpack_from(buf, at)
    if magic != MAGIC or crc != crc32c(bytes(buf[at + 8:at + ENTRY_SIZE])):
        return None
    return LedgerEntry(b, s, f, n, born)


class SinkLedger:
    """The ledger file of one sink (entries in commit order; only the last can be torn)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "ledger"

    def wal_dir(self, batch_id: int) -> Path:
        return self.directory / f"batch-{batch_id:020d}"

    def _valid_length(self, fd: int, size: int) -> int:
        """Bytes of whole entries; a torn last entry (crash while writing it) does not count.
        A bad entry before the last one is corruption, not a torn write."""
        whole = size - size % ENTRY_SIZE
        if whole == 0:
            return 0
        last = os.pread(fd, ENTRY_SIZE, whole - ENTRY_SIZE)
        if decode_entry(last) is not None:
            return whole
        if whole >= 2 * ENTRY_SIZE and \
                decode_entry(os.pread(fd, ENTRY_SIZE, whole - 2 * ENTRY_SIZE)) is None:
            raise CorruptStoreError(f"{self.path}: damaged entries before the last one")
        return whole - ENTRY_SIZE

    def find(self, batch_id: int) -> tuple[LedgerEntry | None, int | None]:
        """(the latest entry for ``batch_id`` or None, the highest batch id recorded or None).

        Entries are in batch order, so the search reads backwards from the end and stops at the
        first entry of an older batch: normally one read of the last entry."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None, None
        try:
            end = self._valid_length(fd, os.fstat(fd).st_size)
            newest = None
            while end > 0:
                start = max(0, end - _READ_ENTRIES * ENTRY_SIZE)
                buf = os.pread(fd, end - start, start)
                for at in range(len(buf) - ENTRY_SIZE, -1, -ENTRY_SIZE):
                    e = decode_entry(buf, at)
                    if e is None:
                        raise CorruptStoreError(f"{self.path}: damaged entry at byte "
                                                f"{start + at}")
                    if newest is None:
                        newest = e.batch_id
                    if e.batch_id == batch_id:
                        return e, newest
                    if e.batch_id < batch_id:
                        return None, newest
                end = start
            return None, newest
        finally:
            os.close(fd)

    def append(self, e: LedgerEntry) -> None:
        """Add an entry and make it durable (cutting a torn last entry first)."""
        created = not self.path.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            end = self._valid_length(fd, os.fstat(fd).st_size)
            os.ftruncate(fd, end)
            os.pwrite(fd, encode_entry(e), end)
            file_ops().fsync(self.path, fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.directory)
            fsync_dir(self.directory.parent)
