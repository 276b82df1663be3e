"""The ref-store record: encode, decode, validate, and scan a buffer of records.

Layout (little-endian; docs/format.md, "11. Reference-counted store files", has the byte-by-byte description)::

    0      u32   size        16 + body length (the message id and the body)
    4      16 B  msg_id
    20     n B   body
    20+n   u32   crc32c      CRC32C of bytes [0, 20+n): size, msg id and body
    24+n   u8    end marker  always 0xFF

A record therefore takes ``body length + 25`` bytes. Records follow each other with no gaps
inside a ref-store data file; a torn or damaged region is skipped by the scanner, which resumes
at the next position where a whole record checks out.

Pure functions only: no file I/O, no threads.
"""

from __future__ import annotations

import struct
from typing import Iterator

from crc32c import crc32c

from strata.errors import CorruptRecordError, InvalidInputError, MessageTooLargeError

MSG_ID_SIZE = 16
END_MARKER = 0xFF

HEADER = struct.Struct("<I16s")      # size, msg id
HEADER_SIZE = HEADER.size            # 20
TRAILER = struct.Struct("<IB")       # crc32c, end marker
TRAILER_SIZE = TRAILER.size          # 5
OVERHEAD = HEADER_SIZE + TRAILER_SIZE  # 25
SIZE_FIELD = struct.Struct("<I")
CRC_FIELD = struct.Struct("<I")
MIN_SIZE_FIELD = MSG_ID_SIZE         # an empty body still carries its id
MAX_SIZE_FIELD = 0xFFFF_FFFF

_END = bytes([END_MARKER])


def record_size(body_len: int) -> int:
    """Bytes a record with a body of ``body_len`` bytes takes in a file."""
    return body_len + OVERHEAD


def check_msg_id(msg_id) -> bytes:
    """Return ``msg_id`` as bytes, or raise InvalidInputError naming what is wrong."""
    if type(msg_id) is not bytes:
        if isinstance(msg_id, (bytearray, memoryview)):
            msg_id = bytes(msg_id)
        else:
            raise InvalidInputError(
                f"a message id must be {MSG_ID_SIZE} bytes, got {type(msg_id).__name__}")
    if len(msg_id) != MSG_ID_SIZE:
        raise InvalidInputError(
            f"a message id must be exactly {MSG_ID_SIZE} bytes, got {len(msg_id)} bytes")
    return msg_id


def check_body(body, max_body: int) -> bytes:
    """Return ``body`` as an immutable bytes-like value, or raise naming what is wrong."""
    if type(body) is not bytes:
        if isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        else:
            raise InvalidInputError(
                f"a message body must be bytes, bytearray or memoryview, got "
                f"{type(body).__name__}")
    if len(body) > max_body:
        raise MessageTooLargeError(
            f"message body is {len(body)} bytes; this store accepts at most {max_body} "
            f"(file_size_limit minus {OVERHEAD} bytes of record overhead)")
    return body


def encode(msg_id: bytes, body: bytes) -> bytes:
    """One whole record as bytes (ids and bodies are assumed already checked)."""
    head = HEADER.pack(MSG_ID_SIZE + len(body), msg_id)
    return b"".join((head, body, TRAILER.pack(crc32c(body, crc32c(head)), END_MARKER)))


def append(buf: bytearray, msg_id: bytes, body: bytes) -> int:
    """Append one record to ``buf``; returns the record's size. The hot write path."""
    head = HEADER.pack(MSG_ID_SIZE + len(body), msg_id)
    buf += head
    buf += body
    buf += TRAILER.pack(crc32c(body, crc32c(head)), END_MARKER)
    return len(body) + OVERHEAD


def check_at(buf, pos: int, end: int | None = None) -> int:
    """Size of the whole, checksummed record at ``pos``, or 0 if there is none there.

    ``end`` bounds the search (default: the end of ``buf``). Never raises on bad bytes.
    """
    if end is None:
        end = len(buf)
    if pos + OVERHEAD > end:
        return 0
    (size,) = SIZE_FIELD.unpack_from(buf, pos)
    if size < MIN_SIZE_FIELD:
        return 0
    total = size + 9
    stop = pos + total
    if stop > end or buf[stop - 1] != END_MARKER:
        return 0
    (crc,) = CRC_FIELD.unpack_from(buf, stop - TRAILER_SIZE)
    with memoryview(buf) as mv:
        if crc32c(mv[pos:stop - TRAILER_SIZE]) != crc:
            return 0
    return total


def decode(buf, pos: int = 0, expect_id: bytes | None = None) -> tuple[bytes, bytes]:
    """Decode the record at ``pos`` into (msg_id, body); raise CorruptRecordError if bad."""
    total = check_at(buf, pos)
    if not total:
        raise CorruptRecordError(
            f"no whole ref-store record at offset {pos} (bad size, end marker or CRC32C)", pos)
    msg_id = bytes(buf[pos + 4:pos + HEADER_SIZE])
    if expect_id is not None and msg_id != expect_id:
        raise CorruptRecordError(
            f"record at offset {pos} holds message {msg_id.hex()}, expected {expect_id.hex()}",
            pos)
    return msg_id, bytes(buf[pos + HEADER_SIZE:pos + total - TRAILER_SIZE])


def body_of(buf, pos: int, total: int, expect_id: bytes) -> bytes:
    """Body of the record of ``total`` bytes at ``pos``, after checking id, marker and CRC."""
    if check_at(buf, pos, pos + total) != total:
        raise CorruptRecordError(
            f"ref-store record at offset {pos} fails its checks (size, end marker or CRC32C)",
            pos)
    if buf[pos + 4:pos + HEADER_SIZE] != expect_id:
        raise CorruptRecordError(
            f"record at offset {pos} does not hold message {expect_id.hex()}", pos)
    return bytes(buf[pos + HEADER_SIZE:pos + total - TRAILER_SIZE])


def scan(buf, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, bytes]]:
    """Yield (offset, total size, msg_id) of every whole record in ``buf[start:end]``.

    Records normally follow each other; where a record fails its checks (a torn tail, a
    damaged region, a partial copy left by a crash) the scanner moves forward one byte at a
    time (skipping zero runs quickly) until a record checks out again.
    """
    if end is None:
        end = len(buf)
    pos = start
    unpack_size = SIZE_FIELD.unpack_from
    unpack_crc = CRC_FIELD.unpack_from
    with memoryview(buf) as mv:
        while pos + OVERHEAD <= end:
            (size,) = unpack_size(mv, pos)
            stop = pos + size + 9
            if (size >= MIN_SIZE_FIELD and stop <= end and mv[stop - 1] == END_MARKER
                    and unpack_crc(mv, stop - TRAILER_SIZE)[0]
                    == crc32c(mv[pos:stop - TRAILER_SIZE])):
                yield pos, stop - pos, bytes(mv[pos + 4:pos + HEADER_SIZE])
                pos = stop
                continue
            pos = _resync(mv, pos + 1, end)


def damaged_regions(buf, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(offset, length) of every stretch of ``buf[start:end]`` that is not a whole record."""
    if end is None:
        end = len(buf)
    regions: list[tuple[int, int]] = []
    expect = start
    for off, total, _ in scan(buf, start, end):
        if off != expect:
            regions.append((expect, off - expect))
        expect = off + total
    if expect < end:
        regions.append((expect, end - expect))
    return regions


def _resync(mv: memoryview, pos: int, end: int) -> int:
    """Next position worth trying after a failed match: skip long runs of zero bytes at once.

    A record's size field is little-endian, so a record may begin with up to three zero bytes
    (a size such as 0x0100 or 0x01000000): the skip stops three bytes short of the first
    non-zero byte.
    """
    if pos + 4 > end or mv[pos:pos + 4] != b"\0\0\0\0":
        return pos
    p = pos
    while p < end:
        chunk = bytes(mv[p:min(end, p + 65536)])
        rest = chunk.lstrip(b"\0")
        p += len(chunk) - len(rest)
        if rest:
            break
    return max(pos, p - 3)
