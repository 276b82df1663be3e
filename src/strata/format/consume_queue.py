"""The consume-queue unit: 20 bytes ``(commit-log offset i64, record size i32, tag hash i64)``.

Unit n of a queue sits at byte 20·n of the queue's logical space. A unit of size 0 is unwritten
(files are zero-filled); a blank unit ``(0, BLANK_SIZE, 0)`` fills a gap before a queue's first
real unit.
"""

from __future__ import annotations

import struct

import numpy as np
from crc32c import crc32c

UNIT = struct.Struct("<qiq")
UNIT_SIZE = UNIT.size  # 20
UNIT_DTYPE = np.dtype([("offset", "<i8"), ("size", "<i4"), ("tag", "<i8")])
assert UNIT_DTYPE.itemsize == UNIT_SIZE
BLANK_SIZE = 0x7FFF_FFFF
BLANK_UNIT = UNIT.pack(0, BLANK_SIZE, 0)
NO_TAG = 0


def tag_hash(tag: str | None) -> int:
    """The tag code stored in a unit: CRC32C of the tag's UTF-8 bytes, 0 for no tag."""
    if not tag:
        return NO_TAG
    return crc32c(tag.encode("utf-8"))
