"""Segment file header and footer: what makes a fixed-size file self-describing.

A segment file is ``[header page][data: data_size bytes][footer page]``. The header is written
when the file is created; the footer when the segment is sealed, so recovery can trust a
sealed segment without rescanning it. Byte layouts are in docs/format.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

PAGE = 4096
HEADER_AREA = PAGE   # data starts on a page boundary, which keeps msync ranges aligned
FOOTER_AREA = PAGE

HEADER_MAGIC = b"STRATASG"
FOOTER_MAGIC = b"STRATAFT"
FORMAT_VERSION = 1

KIND_COMMIT_LOG = 1
KIND_CONSUME_QUEUE = 2
KIND_NAMES = {KIND_COMMIT_LOG: "commit log", KIND_CONSUME_QUEUE: "consume queue"}

_HEADER = struct.Struct("<8sHHIQQ")        # magic, version, kind, reserved, base, data_size
_HEADER_CRC = struct.Struct("<I")
_FOOTER = struct.Struct("<8sIIQQqqI")      # magic, version, reserved, count, length, min, max, crc
_FOOTER_CRC = struct.Struct("<I")
HEADER_BYTES = _HEADER.size + _HEADER_CRC.size
FOOTER_BYTES = _FOOTER.size + _FOOTER_CRC.size


def file_size(data_size: int) -> int:
    """Bytes on disk of a segment holding ``data_size`` data bytes."""
    return HEADER_AREA + data_size + FOOTER_AREA


def file_name(base_offset: int) -> str:
    """Segment files are named by their 20-digit base offset."""
    return f"{base_offset:020d}"


@dataclass(frozen=True)
class SegmentHeader:
    kind: int
    base_offset: int
    data_size: int
    version: int = FORMAT_VERSION

    def encode(self) -> bytes:
        raw = _HEADER.pack(HEADER_MAGIC, self.version, self.kind, 0, self.base_offset,
                           self.data_size)
        return raw + _HEADER_CRC.pack(crc32c(raw))

    @classmethod
    def decode(cls, buf) -> "SegmentHeader":
        """Decode and check a header; ValueError naming the problem if it is not one."""
        raw = bytes(buf[:HEADER_BYTES])
        if len(raw) < HEADER_BYTES:
            raise ValueError("file is shorter than a segment header")
        magic, version, kind, _r, base, size = _HEADER.unpack_from(raw)
        if magic != HEADER_MAGIC:
            raise ValueError(f"not a strata segment (magic {magic!r})")
        (crc,) = _HEADER_CRC.unpack_from(raw, _HEADER.size)
        if crc != crc32c(raw[:_HEADER.size]):
            raise ValueError("segment header checksum mismatch")
        if version != FORMAT_VERSION:
            raise ValueError(f"segment format version {version} is not supported "
                             f"(this strata reads version {FORMAT_VERSION})")
        return cls(kind=kind, base_offset=base, data_size=size, version=version)


@dataclass(frozen=True)
class SegmentFooter:
    """Written at seal: record count, data length, store-time range and data checksum."""

    record_count: int
    data_length: int
    min_store_timestamp: int
    max_store_timestamp: int
    data_crc: int

    def encode(self) -> bytes:
        raw = _FOOTER.pack(FOOTER_MAGIC, FORMAT_VERSION, 0, self.record_count, self.data_length,
                           self.min_store_timestamp, self.max_store_timestamp, self.data_crc)
        return raw + _FOOTER_CRC.pack(crc32c(raw))

    @classmethod
    def decode(cls, buf) -> "SegmentFooter | None":
        """The footer in ``buf``, or None when none was written or it fails its checksum."""
        raw = bytes(buf[:FOOTER_BYTES])
        if len(raw) < FOOTER_BYTES or raw[:8] != FOOTER_MAGIC:
            return None
        (crc,) = _FOOTER_CRC.unpack_from(raw, _FOOTER.size)
        if crc != crc32c(raw[:_FOOTER.size]):
            return None
        _m, _v, _r, count, length, tmin, tmax, dcrc = _FOOTER.unpack_from(raw)
        return cls(count, length, tmin, tmax, dcrc)
