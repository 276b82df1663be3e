"""Key index file: header, hash slots and chained 20-byte entries (pure layout, no I/O).

A key index file is ``[header: 72 bytes][slots × u32][entries × 20 bytes]`` (little-endian;
docs/format.md, "10. Key-index files", has the byte-by-byte description)::

    header
     0  8s  magic                 INDEX_MAGIC
     8  u16 version               FORMAT_VERSION
    10  u16 reserved              0
    12  u32 slot_count            hash slots in this file
    16  u32 entry_capacity        entry numbers 0 .. capacity-1; entry 0 is never used
    20  u32 reserved              0
    24  i64 begin_offset          commit-log offset of the first entry (immutable)
    32  i64 base_timestamp        store time (ms) of the first entry; entry deltas count from it
    40  u32 geometry_crc          CRC32C of bytes [0, 40)
    -- counters, rewritten together once per batch --
    44  u32 flags                 FLAG_TIMES_NOT_MONOTONE | FLAG_SEALED
    48  i64 end_offset            commit-log offset of the newest entry (-1 while empty)
    56  u32 entry_count           next entry number (1 while empty)
    60  u32 used_slots            slots whose chain is not empty
    64  i32 min_time_delta        smallest entry time delta (seconds)
    68  i32 max_time_delta        largest entry time delta (seconds)

    slot    u32  number of the newest entry whose hash falls in the slot (0 = empty chain)
    entry   u32 key_hash, i64 physical_offset, i32 time_delta, i32 previous_entry (0 = end)

Pure functions and precompiled structs only: no file I/O, no threads.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

INDEX_MAGIC = b"STRATAKX"
FORMAT_VERSION = 1

FLAG_TIMES_NOT_MONOTONE = 0x1  # some entry's delta is below its predecessor's: no early stop
FLAG_SEALED = 0x2              # full and flushed: recovery trusts it without checking

HASH_MASK = 0x7FFFFFFF
DELTA_MIN = -(1 << 31)
DELTA_MAX = (1 << 31) - 1
MAX_SLOTS = (1 << 31) - 1
MAX_ENTRIES = (1 << 31) - 1    # previous_entry is an i32

_GEOMETRY = struct.Struct("<8sHHIIIqq")   # magic, version, reserved, slots, capacity, reserved,
#                                          begin_offset, base_timestamp
_GEOMETRY_CRC = struct.Struct("<I")
COUNTERS = struct.Struct("<IqIIii")       # flags, end_offset, count, used_slots, min_d, max_d
SLOT = struct.Struct("<I")
ENTRY = struct.Struct("<Iqii")            # key_hash, physical_offset, time_delta, previous

POS_GEOMETRY_CRC = _GEOMETRY.size         # 40
POS_COUNTERS = POS_GEOMETRY_CRC + 4       # 44
HEADER_BYTES = POS_COUNTERS + COUNTERS.size  # 72
SLOT_BYTES = SLOT.size                    # 4
ENTRY_BYTES = ENTRY.size                  # 20

# numpy view of the entries area (packed, little-endian), for recovery scans.
ENTRY_DTYPE = np.dtype([("hash", "<u4"), ("offset", "<i8"), ("delta", "<i4"), ("prev", "<i4")])
assert ENTRY_DTYPE.itemsize == ENTRY_BYTES

_NAME = re.compile(r"^(\d{20})(?:-(\d+))?$")


# --------------------------------------------------------------------------- geometry


def file_size(slots: int, entries: int) -> int:
    """Bytes on disk of a key index file with ``slots`` slots and ``entries`` entry numbers."""
    return HEADER_BYTES + slots * SLOT_BYTES + entries * ENTRY_BYTES


def slot_position(slot: int) -> int:
    """Byte position of slot ``slot``."""
    return HEADER_BYTES + slot * SLOT_BYTES


def entries_position(slots: int) -> int:
    """Byte position of entry number 0 in a file with ``slots`` slots."""
    return HEADER_BYTES + slots * SLOT_BYTES


def entry_position(slots: int, number: int) -> int:
    """Byte position of entry ``number`` in a file with ``slots`` slots."""
    return HEADER_BYTES + slots * SLOT_BYTES + number * ENTRY_BYTES


def file_name(begin_offset: int, sequence: int = 0) -> str:
    """Files are named by the 20-digit commit-log offset of their first entry.

    ``sequence`` > 0 only when one message has more keys than a whole file holds, so that
    consecutive files begin at the same offset; the name then gains ``-<sequence>``.
    """
    base = f"{begin_offset:020d}"
    return base if sequence == 0 else f"{base}-{sequence}"


def parse_file_name(name: str) -> tuple[int, int] | None:
    """(begin_offset, sequence) of a key index file name, or None for any other name."""
    m = _NAME.match(name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2) or 0)


# --------------------------------------------------------------------------- header


@dataclass(frozen=True)
class KeyIndexHeader:
    """Everything in a key index file header."""

    slots: int
    entries: int
    begin_offset: int
    base_timestamp: int
    flags: int = 0
    end_offset: int = -1
    entry_count: int = 1
    used_slots: int = 0
    min_delta: int = 0
    max_delta: int = 0
    version: int = FORMAT_VERSION

    def encode(self) -> bytes:
        geo = _GEOMETRY.pack(INDEX_MAGIC, self.version, 0, self.slots, self.entries, 0,
                             self.begin_offset, self.base_timestamp)
        return (geo + _GEOMETRY_CRC.pack(crc32c(geo))
                + COUNTERS.pack(self.flags, self.end_offset, self.entry_count, self.used_slots,
                                self.min_delta, self.max_delta))

    @classmethod
    def decode(cls, buf) -> "KeyIndexHeader":
        """Decode and check a header; ValueError naming the problem if it is not one."""
        raw = bytes(buf[:HEADER_BYTES])
        if len(raw) < HEADER_BYTES:
            raise ValueError(f"file is {len(raw)} bytes, shorter than a key index header")
        magic, version, _r, slots, entries, _r2, begin, base = _GEOMETRY.unpack_from(raw)
        if magic != INDEX_MAGIC:
            raise ValueError(f"not a strata key index file (magic {magic!r})")
        (crc,) = _GEOMETRY_CRC.unpack_from(raw, POS_GEOMETRY_CRC)
        if crc != crc32c(raw[:POS_GEOMETRY_CRC]):
            raise ValueError("key index header checksum mismatch")
        if version != FORMAT_VERSION:
            raise ValueError(f"key index format version {version} is not supported "
                             f"(this strata reads version {FORMAT_VERSION})")
        flags, end, count, used, min_d, max_d = COUNTERS.unpack_from(raw, POS_COUNTERS)
        return cls(slots=slots, entries=entries, begin_offset=begin, base_timestamp=base,
                   flags=flags, end_offset=end, entry_count=count, used_slots=used,
                   min_delta=min_d, max_delta=max_d, version=version)

    def validate(self, length: int) -> None:
        """Check the geometry against the file's length and the counters against the geometry."""
        if not 1 <= self.slots <= MAX_SLOTS:
            raise ValueError(f"slot count {self.slots} is out of range")
        if not 2 <= self.entries <= MAX_ENTRIES:
            raise ValueError(f"entry capacity {self.entries} is out of range")
        expected = file_size(self.slots, self.entries)
        if length != expected:
            raise ValueError(f"file is {length} bytes but its header ({self.slots} slots, "
                             f"{self.entries} entries) needs {expected}")
        if not 1 <= self.entry_count <= self.entries:
            raise ValueError(f"entry count {self.entry_count} is outside 1..{self.entries}")
        if self.used_slots > min(self.slots, self.entry_count - 1):
            raise ValueError(f"used slot count {self.used_slots} exceeds what "
                             f"{self.entry_count - 1} entries can fill")


# Readers in other processes look at the counters and slots while the writer changes them.
# Both sides copy a field whole (a slice is one memcpy: each aligned field one load or store);
# struct's pack_into zero-fills a field and then stores it a byte at a time, and unpack_from
# loads a byte at a time, so a reader could see 0 or a mix of an old and a new value.


def peek_counters(buf) -> tuple[int, int, int, int, int, int]:
    """(flags, end_offset, entry_count, used_slots, min_delta, max_delta) of a mapped file."""
    return COUNTERS.unpack(buf[POS_COUNTERS:POS_COUNTERS + COUNTERS.size])


def write_counters(buf, flags: int, end_offset: int, entry_count: int, used_slots: int,
                   min_delta: int, max_delta: int) -> None:
    """Rewrite the counters in place (one write per batch)."""
    buf[POS_COUNTERS:POS_COUNTERS + COUNTERS.size] = COUNTERS.pack(
        flags, end_offset, entry_count, used_slots, min_delta, max_delta)


# --------------------------------------------------------------------------- entries


def encode_entry(key_hash: int, physical_offset: int, time_delta: int, previous: int) -> bytes:
    return ENTRY.pack(key_hash, physical_offset, time_delta, previous)


def decode_entry(buf, pos: int = 0) -> tuple[int, int, int, int]:
    """(key_hash, physical_offset, time_delta, previous_entry) at ``pos``."""
    return ENTRY.unpack_from(buf, pos)


def encode_slot(entry_number: int) -> bytes:
    return SLOT.pack(entry_number)


def decode_slot(buf, pos: int = 0) -> int:
    return SLOT.unpack_from(buf, pos)[0]


# --------------------------------------------------------------------------- keys and time


def key_hash(key: str) -> int:
    """Default key hash: CRC32C of the UTF-8 key, reduced to 31 bits."""
    return crc32c(key.encode("utf-8")) & HASH_MASK


def time_delta(store_timestamp: int, base_timestamp: int) -> int:
    """Whole seconds from the file's base time (floored), clamped to an i32.

    The entry's store time lies in ``[base + 1000·d, base + 1000·d + 999]`` unless clamped.
    """
    d = (store_timestamp - base_timestamp) // 1000
    if d > DELTA_MAX:
        return DELTA_MAX
    if d < DELTA_MIN:
        return DELTA_MIN
    return d


def delta_bounds(begin_ms: int, end_ms: int, base_timestamp: int) -> tuple[int, int]:
    """Delta range [lo, hi] of entries whose second may overlap ``[begin_ms, end_ms]``.

    Clamped the same way as entry deltas, so a clamped entry is kept whenever it might match.
    """
    lo = -((base_timestamp + 999 - begin_ms) // 1000)      # ceil((begin - base - 999) / 1000)
    hi = (end_ms - base_timestamp) // 1000
    return (min(max(lo, DELTA_MIN), DELTA_MAX), min(max(hi, DELTA_MIN), DELTA_MAX))


def time_range(base_timestamp: int, min_delta: int, max_delta: int) -> tuple[int, int]:
    """Coarse store-time range (ms) covered by entries with deltas in [min_delta, max_delta]."""
    return base_timestamp + min_delta * 1000, base_timestamp + max_delta * 1000 + 999
