"""Clean-shutdown files: the saved index, the saved file summary and the clean marker.

Each is written to a ``.tmp`` name, fsynced and renamed into place; the clean marker goes
last and carries the CRC32C and length of the other two, so its presence proves both whole.
Byte layouts are in docs/format.md (section 11). Encoding and decoding are pure; ``save`` and
``load`` are the I/O edges.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

from strata.files.io import file_ops, fsync_dir

from .errors import CorruptSnapshotError
from . import layout

INDEX_MAGIC = b"STRSIDX1"
SUMMARY_MAGIC = b"STRSSUM1"
CLEAN_MAGIC = b"STRSCLN1"
VERSION = 1

INDEX_HEADER = struct.Struct("<8sIIQ")          # magic, version, flags, count
SUMMARY_HEADER = struct.Struct("<8sIIQQ")       # magic, version, flags, count, file_size_limit
SUMMARY_ROW = np.dtype([("number", "<u8"), ("valid", "<u8"), ("size", "<u8"),
                        ("left", "<i8"), ("right", "<i8")])
CLEAN_HEADER = struct.Struct("<8sIIIIQQ")       # magic, version, n_refs, index crc,
                                                # summary crc, index length, summary length
REF_LEN = struct.Struct("<H")
CRC = struct.Struct("<I")


@dataclass
class SummaryRow:
    number: int
    valid: int
    size: int
    left: int | None
    right: int | None


@dataclass
class Snapshot:
    """What a clean shutdown saved."""

    client_refs: list[str]
    ids_raw: bytes
    ref: np.ndarray
    file: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    rows: list[SummaryRow]
    file_size_limit: int


# ---------------------------------------------------------------------- pure encode / decode

def encode_index(ids_raw: bytes, ref, file, offset, size) -> bytes:
    n = len(ids_raw) // 16
    body = b"".join((INDEX_HEADER.pack(INDEX_MAGIC, VERSION, 0, n), ids_raw,
                     np.asarray(ref, dtype="<u4").tobytes(),
                     np.asarray(file, dtype="<u4").tobytes(),
                     np.asarray(offset, dtype="<u8").tobytes(),
                     np.asarray(size, dtype="<u4").tobytes()))
    return body + CRC.pack(crc32c(body))


def decode_index(raw: bytes):
    _check_crc(raw, layout.INDEX_NAME)
    magic, version, _flags, n = INDEX_HEADER.unpack_from(raw, 0)
    if magic != INDEX_MAGIC or version != VERSION:
        raise CorruptSnapshotError(f"{layout.INDEX_NAME}: not a version-{VERSION} saved index")
    expect = INDEX_HEADER.size + n * (16 + 4 + 4 + 8 + 4) + CRC.size
    if len(raw) != expect:
        raise CorruptSnapshotError(
            f"{layout.INDEX_NAME}: {len(raw)} bytes, expected {expect} for {n} entries")
    pos = INDEX_HEADER.size
    ids_raw = raw[pos:pos + 16 * n]
    pos += 16 * n
    cols = []
    for dt, w in (("<u4", 4), ("<u4", 4), ("<u8", 8), ("<u4", 4)):
        cols.append(np.frombuffer(raw, dtype=dt, count=n, offset=pos))
        pos += w * n
    return (ids_raw, *cols)


def encode_summary(rows: list[SummaryRow], file_size_limit: int) -> bytes:
    arr = np.zeros(len(rows), dtype=SUMMARY_ROW)
    for i, r in enumerate(rows):
        arr[i] = (r.number, r.valid, r.size, -1 if r.left is None else r.left,
                  -1 if r.right is None else r.right)
    body = SUMMARY_HEADER.pack(SUMMARY_MAGIC, VERSION, 0, len(rows), file_size_limit) + \
        arr.tobytes()
    return body + CRC.pack(crc32c(body))


def decode_summary(raw: bytes) -> tuple[list[SummaryRow], int]:
    _check_crc(raw, layout.SUMMARY_NAME)
    magic, version, _flags, n, limit = SUMMARY_HEADER.unpack_from(raw, 0)
    if magic != SUMMARY_MAGIC or version != VERSION:
        raise CorruptSnapshotError(f"{layout.SUMMARY_NAME}: not a version-{VERSION} summary")
    expect = SUMMARY_HEADER.size + n * SUMMARY_ROW.itemsize + CRC.size
    if len(raw) != expect:
        raise CorruptSnapshotError(
            f"{layout.SUMMARY_NAME}: {len(raw)} bytes, expected {expect} for {n} rows")
    arr = np.frombuffer(raw, dtype=SUMMARY_ROW, count=n, offset=SUMMARY_HEADER.size)
    rows = [SummaryRow(int(a["number"]), int(a["valid"]), int(a["size"]),
                       None if a["left"] < 0 else int(a["left"]),
                       None if a["right"] < 0 else int(a["right"])) for a in arr]
    return rows, limit


def encode_clean(client_refs: list[str], index_raw: bytes, summary_raw: bytes) -> bytes:
    parts = [CLEAN_HEADER.pack(CLEAN_MAGIC, VERSION, len(client_refs), crc32c(index_raw),
                               crc32c(summary_raw), len(index_raw), len(summary_raw))]
    for ref in client_refs:
        b = ref.encode("utf-8")
        parts.append(REF_LEN.pack(len(b)))
        parts.append(b)
    body = b"".join(parts)
    return body + CRC.pack(crc32c(body))


def decode_clean(raw: bytes) -> tuple[list[str], int, int, int, int]:
    """(client refs, index crc, summary crc, index length, summary length)."""
    _check_crc(raw, layout.CLEAN_NAME)
    if len(raw) < CLEAN_HEADER.size + CRC.size:
        raise CorruptSnapshotError(f"{layout.CLEAN_NAME}: too short")
    magic, version, n, icrc, scrc, ilen, slen = CLEAN_HEADER.unpack_from(raw, 0)
    if magic != CLEAN_MAGIC or version != VERSION:
        raise CorruptSnapshotError(f"{layout.CLEAN_NAME}: not a version-{VERSION} clean marker")
    pos = CLEAN_HEADER.size
    refs = []
    for _ in range(n):
        (ln,) = REF_LEN.unpack_from(raw, pos)
        refs.append(raw[pos + 2:pos + 2 + ln].decode("utf-8"))
        pos += 2 + ln
    if pos != len(raw) - CRC.size:
        raise CorruptSnapshotError(f"{layout.CLEAN_NAME}: client refs overrun the file")
    return refs, icrc, scrc, ilen, slen


def _check_crc(raw: bytes, name: str) -> None:
    if len(raw) < CRC.size + 8:
        raise CorruptSnapshotError(f"{name}: too short ({len(raw)} bytes)")
    (crc,) = CRC.unpack_from(raw, len(raw) - CRC.size)
    if crc != crc32c(memoryview(raw)[:len(raw) - CRC.size]):
        raise CorruptSnapshotError(f"{name}: CRC32C mismatch")


# ---------------------------------------------------------------------- I/O edges

def _write_replace(directory: str, name: str, data: bytes) -> None:
    tmp = os.path.join(directory, name + layout.SNAPSHOT_TEMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        file_ops().fsync(tmp, fd)
    finally:
        os.close(fd)
    file_ops().replace(tmp, os.path.join(directory, name))


def save(directory: str, client_refs: list[str], index_cols, rows: list[SummaryRow],
         file_size_limit: int) -> None:
    """Write index, summary, then the clean marker (each atomically), then fsync the dir."""
    index_raw = encode_index(*index_cols)
    summary_raw = encode_summary(rows, file_size_limit)
    _write_replace(directory, layout.INDEX_NAME, index_raw)
    _write_replace(directory, layout.SUMMARY_NAME, summary_raw)
    fsync_dir(directory)
    _write_replace(directory, layout.CLEAN_NAME, encode_clean(client_refs, index_raw,
                                                               summary_raw))
    fsync_dir(directory)


def exists(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, layout.CLEAN_NAME))


def load(directory: str) -> Snapshot:
    """Read and check all three files; raise CorruptSnapshotError if anything is off."""
    try:
        with open(os.path.join(directory, layout.CLEAN_NAME), "rb") as f:
            clean_raw = f.read()
        refs, icrc, scrc, ilen, slen = decode_clean(clean_raw)
        with open(os.path.join(directory, layout.INDEX_NAME), "rb") as f:
            index_raw = f.read()
        with open(os.path.join(directory, layout.SUMMARY_NAME), "rb") as f:
            summary_raw = f.read()
    except FileNotFoundError as exc:
        raise CorruptSnapshotError(f"clean-shutdown file missing: {exc.filename}") from exc
    if len(index_raw) != ilen or crc32c(index_raw) != icrc:
        raise CorruptSnapshotError(f"{layout.INDEX_NAME} does not match the clean marker")
    if len(summary_raw) != slen or crc32c(summary_raw) != scrc:
        raise CorruptSnapshotError(f"{layout.SUMMARY_NAME} does not match the clean marker")
    ids_raw, ref, file, offset, size = decode_index(index_raw)
    rows, limit = decode_summary(summary_raw)
    return Snapshot(refs, ids_raw, ref, file, offset, size, rows, limit)


def discard(directory: str) -> None:
    """Remove the clean marker first (so a crash from here on means a dirty start), then the rest."""
    names = [layout.CLEAN_NAME, layout.INDEX_NAME, layout.SUMMARY_NAME]
    for name in names:
        for n in (name, name + layout.SNAPSHOT_TEMP_SUFFIX):
            try:
                os.unlink(os.path.join(directory, n))
            except FileNotFoundError:
                pass
        if name == layout.CLEAN_NAME:
            fsync_dir(directory)
    fsync_dir(directory)
