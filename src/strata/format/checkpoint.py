"""The checkpoint record and the live state page.

``checkpoint`` is rewritten atomically (temp file + rename) by the flush service and at close;
it says how far the commit log is known durable and, after a clean close, exactly where it ends.
``state`` is a small mmapped page the writer updates in place so read-only openers in other
processes learn the confirmed offset (what consumers may see) without locks.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

CHECKPOINT_MAGIC = b"STRATACP"
STATE_MAGIC = b"STRATAST"

_CHECKPOINT = struct.Struct("<8sIIqqqqqqqqq")
_CRC = struct.Struct("<I")
CHECKPOINT_BYTES = _CHECKPOINT.size + _CRC.size

# state page: magic, version, pid, confirmed offset, dispatched offset, min offset, crc-less.
_STATE = struct.Struct("<8sIIqqq")
STATE_BYTES = _STATE.size
STATE_POS_CONFIRMED = 16
STATE_POS_DISPATCHED = 24
STATE_POS_MIN = 32
STATE_OFFSET = struct.Struct("<q")


@dataclass(frozen=True)
class Checkpoint:
    """What the store knew durable at the time it was written.

    clean_end_offset is the exact end of the commit log, written only at a clean close
    (-1 otherwise); flushed_offset is the offset up to which the log was fsynced.
    """

    flushed_offset: int = 0
    clean_end_offset: int = -1
    physic_timestamp: int = 0
    dispatched_offset: int = 0
    index_timestamp: int = 0
    min_offset: int = 0
    active_record_count: int = 0
    active_min_timestamp: int = 0
    active_max_timestamp: int = 0
    version: int = 1

    def encode(self) -> bytes:
        raw = _CHECKPOINT.pack(CHECKPOINT_MAGIC, self.version, 0, self.flushed_offset,
                               self.clean_end_offset, self.physic_timestamp,
                               self.dispatched_offset, self.index_timestamp, self.min_offset,
                               self.active_record_count, self.active_min_timestamp,
                               self.active_max_timestamp)
        return raw + _CRC.pack(crc32c(raw))

    @classmethod
    def decode(cls, raw: bytes) -> "Checkpoint":
        if len(raw) < CHECKPOINT_BYTES or raw[:8] != CHECKPOINT_MAGIC:
            raise ValueError("not a strata checkpoint")
        (crc,) = _CRC.unpack_from(raw, _CHECKPOINT.size)
        if crc != crc32c(raw[:_CHECKPOINT.size]):
            raise ValueError("checkpoint checksum mismatch")
        (_m, version, _r, flushed, clean_end, pts, disp, its, mino, count, tmin,
         tmax) = _CHECKPOINT.unpack_from(raw)
        return cls(flushed, clean_end, pts, disp, its, mino, count, tmin, tmax, version)


def encode_state(pid: int, confirmed: int, dispatched: int, min_offset: int) -> bytes:
    return _STATE.pack(STATE_MAGIC, 1, pid, confirmed, dispatched, min_offset)


def decode_state(buf) -> tuple[int, int, int, int]:
    """(pid, confirmed offset, dispatched offset, min offset) from a state page."""
    magic, _v, pid, confirmed, dispatched, mino = _STATE.unpack_from(buf)
    if magic != STATE_MAGIC:
        raise ValueError("not a strata state page")
    return pid, confirmed, dispatched, mino
