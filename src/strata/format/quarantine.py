"""The quarantine file: commit-log bytes that recovery cut from the log, kept aside.

Recovery cuts only a proven torn tail (no good record after it), and copies the cut bytes here
first, so an operator can still look at them. A quarantine file is a header and pieces, all
integers little-endian:

    header  magic "STRATAQ1" (8 bytes), u32 version (1), u32 piece count,
            u32 CRC32C of the 16 bytes before it
    piece   i64 commit-log offset of the piece's first byte, u64 length,
            u32 CRC32C of the 16 bytes before it and the data, u32 reserved (0),
            then ``length`` data bytes

Pieces follow one another in log order. Pure functions, no file I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from strata.errors import CorruptStoreError

QUARANTINE_MAGIC = b"STRATAQ1"
QUARANTINE_VERSION = 1
_HEADER = struct.Struct("<8sII")
_CRC = struct.Struct("<I")
_PIECE = struct.Struct("<qQII")
_WHERE = struct.Struct("<qQ")
HEADER_BYTES = _HEADER.size + _CRC.size
PIECE_HEADER_BYTES = _PIECE.size


@dataclass(frozen=True)
class QuarantinedPiece:
    """``data`` was the commit log's bytes from ``offset`` on before recovery cut them."""

    offset: int
    data: bytes

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


def encode_quarantine(pieces: list[QuarantinedPiece]) -> bytes:
    """The bytes of a quarantine file holding ``pieces``."""
    head = _HEADER.pack(QUARANTINE_MAGIC, QUARANTINE_VERSION, len(pieces))
    out = [head, _CRC.pack(crc32c(head))]
    for p in pieces:
        where = _WHERE.pack(p.offset, len(p.data))
        out.append(_PIECE.pack(p.offset, len(p.data), crc32c(p.data, crc32c(where)), 0))
        out.append(bytes(p.data))
    return b"".join(out)


def decode_quarantine(buf: bytes, name: str = "quarantine file") -> list[QuarantinedPiece]:
    """The pieces of a quarantine file; CorruptStoreError naming what is wrong."""
    if len(buf) < HEADER_BYTES:
        raise CorruptStoreError(f"{name}: {len(buf)} bytes, shorter than its header")
    magic, version, count = _HEADER.unpack_from(buf, 0)
    if magic != QUARANTINE_MAGIC:
        raise CorruptStoreError(f"{name}: not a quarantine file (magic {magic!r})")
    if _CRC.unpack_from(buf, _HEADER.size)[0] != crc32c(buf[:_HEADER.size]):
        raise CorruptStoreError(f"{name}: header CRC32C mismatch")
    if version != QUARANTINE_VERSION:
        raise CorruptStoreError(f"{name}: version {version}, this strata reads "
                                f"{QUARANTINE_VERSION}")
    pieces, pos = [], HEADER_BYTES
    for i in range(count):
        if pos + PIECE_HEADER_BYTES > len(buf):
            raise CorruptStoreError(f"{name}: piece {i} is cut short")
        offset, length, crc, reserved = _PIECE.unpack_from(buf, pos)
        where = buf[pos:pos + _WHERE.size]
        pos += PIECE_HEADER_BYTES
        if reserved:
            raise CorruptStoreError(f"{name}: piece {i}: reserved field is {reserved}, not 0")
        data = bytes(buf[pos:pos + length])
        if len(data) != length:
            raise CorruptStoreError(f"{name}: piece {i} at offset {offset} is cut short")
        if crc32c(data, crc32c(where)) != crc:
            raise CorruptStoreError(f"{name}: piece {i} at offset {offset}: CRC32C mismatch")
        pieces.append(QuarantinedPiece(offset, data))
        pos += length
    return pieces
