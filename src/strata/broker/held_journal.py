"""The held-message journal: the bytes of ``broker/held.journal``.

The time index of the messages the broker holds back (delay messages until due, half messages
of transactions until resolved); their bodies live in the ref-counted store ``broker/held/``.
The file is framed as the consumer-group journal is (``strata.broker.journal``: a 16-byte
header with its own magic ``STRATAHJ``, then ``[u32 length][u32 crc32c][payload]`` records,
a torn tail cut off at open); each payload starts with a type byte. docs/format.md
("Held messages") describes every byte.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from strata.broker.journal import frame

MAGIC = b"STRATAHJ"
VERSION = 1
ID_BYTES = 16
_STR_LEN = struct.Struct("<H")
_HOLD = struct.Struct("<16sBqI")      # id, kind, due ms, checks so far
_IDS_HEAD = struct.Struct("<BqI")     # reason (RELEASE) / 0 (MOVING), log offset, id count
_CHECKED = struct.Struct("<16sIq")    # id, checks so far, next check ms


class Type(enum.IntEnum):
    HOLD = 1       # a message is held: id, kind, due time, checks, topic, client message id
    RELEASE = 2    # held messages are gone: moved to their topic, rolled back or dropped
    MOVING = 3     # held messages are being put into their topics from this log offset on
    CHECKED = 4    # a half message was checked back (count, next check time)


class Kind(enum.IntEnum):
    DELAY = 1
    TRANSACTION = 2


class Reason(enum.IntEnum):
    NONE = 0
    MOVED = 1          # put into its topic (a delay message due, a transaction committed)
    ROLLED_BACK = 2
    DROPPED = 3        # a half message unresolved after the last check
    RECALLED = 4       # a delay message its producer recalled before it was due


@dataclass(frozen=True)
class HeldRecord:
    """A decoded record; fields a type does not carry keep their defaults."""

    type: Type
    ids: tuple[bytes, ...] = ()
    kind: Kind = Kind.DELAY
    due_ms: int = 0
    checks: int = 0
    topic: str = ""
    message_id: str = ""
    reason: Reason = Reason.NONE
    log_offset: int = 0


def _str(text: str) -> bytes:
    b = text.encode()
    return _STR_LEN.pack(len(b)) + b


def encode_hold(held_id: bytes, kind: Kind, due_ms: int, checks: int, topic: str,
                message_id: str) -> bytes:
    return frame(bytes((Type.HOLD,)) + _HOLD.pack(held_id, kind, due_ms, checks)
                 + _str(topic) + _str(message_id))


def _ids(type_: Type, reason: int, log_offset: int, ids: list[bytes]) -> bytes:
    return frame(bytes((type_,)) + _IDS_HEAD.pack(reason, log_offset, len(ids)) + b"".join(ids))


def encode_release(reason: Reason, ids: list[bytes]) -> bytes:
    return _ids(Type.RELEASE, reason, 0, ids)


def encode_moving(log_offset: int, ids: list[bytes]) -> bytes:
    """Written before the put: the moved copies are at or after ``log_offset``."""
    return _ids(Type.MOVING, 0, log_offset, ids)


def encode_checked(held_id: bytes, checks: int, next_ms: int) -> bytes:
    return frame(bytes((Type.CHECKED,)) + _CHECKED.pack(held_id, checks, next_ms))


def decode(p: bytes) -> HeldRecord:
    """One record's payload; ValueError (or struct.error) unless it parses whole."""
    t = Type(p[0])
    pos = 1
    if t is Type.HOLD:
        held_id, kind, due, checks = _HOLD.unpack_from(p, pos)
        pos += _HOLD.size
        strs = []
        for _ in range(2):
            (n,) = _STR_LEN.unpack_from(p, pos)
            if pos + 2 + n > len(p):
                raise ValueError("HOLD record cut short")
            strs.append(p[pos + 2:pos + 2 + n].decode())
            pos += 2 + n
        rec = HeldRecord(t, (held_id,), Kind(kind), due, checks, strs[0], strs[1])
    elif t is Type.CHECKED:
        held_id, checks, due = _CHECKED.unpack_from(p, pos)
        pos += _CHECKED.size
        rec = HeldRecord(t, (held_id,), checks=checks, due_ms=due)
    else:
        reason, log_offset, n = _IDS_HEAD.unpack_from(p, pos)
        pos += _IDS_HEAD.size
        ids = tuple(p[pos + i * ID_BYTES:pos + (i + 1) * ID_BYTES] for i in range(n))
        pos += n * ID_BYTES
        rec = HeldRecord(t, ids, reason=Reason(reason), log_offset=log_offset)
    if pos != len(p):
        raise ValueError(f"{t.name} record has {len(p) - pos} bytes too many or too few")
    return rec
