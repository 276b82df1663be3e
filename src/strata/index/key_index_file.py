"""One mapped key-index file: its immutable geometry plus the writer's copy of its counters."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from strata.format import key_index as fmt

_ENTRY = fmt.ENTRY
_SEALED = fmt.FLAG_SEALED
_TMP_SUFFIX = ".tmp"
SPARE_NAME = "next.spare"   # the next file's space, reserved ahead (see KeyIndex.ensure_spare)


class _IndexFile:
    """One mapped index file: its immutable geometry plus the writer's copy of the counters."""

    __slots__ = ("path", "name", "order", "inode", "mm", "slots", "capacity", "entries_pos",
                 "begin_offset", "base_ts", "flags", "end_offset", "count", "used", "min_d",
                 "max_d", "last_d", "dirty")

    def __init__(self, path: Path, mm: mmap.mmap, header: fmt.KeyIndexHeader,
                 order: tuple[int, int], inode: int) -> None:
        self.path = path
        self.name = path.name
        self.order = order
        self.inode = inode
        self.mm = mm
        self.slots = header.slots
        self.capacity = header.entries
        self.entries_pos = fmt.entries_position(header.slots)
        self.begin_offset = header.begin_offset
        self.base_ts = header.base_timestamp
        self.dirty = False
        self.load_counters()

    def load_counters(self) -> None:
        (self.flags, self.end_offset, self.count, self.used, self.min_d,
         self.max_d) = fmt.peek_counters(self.mm)
        self.last_d = (_ENTRY.unpack_from(self.mm, self.entries_pos + (self.count - 1) * 20)[2]
                       if self.count > 1 else 0)

    def store_counters(self) -> None:
        fmt.write_counters(self.mm, self.flags, self.end_offset, self.count, self.used,
                           self.min_d, self.max_d)

    def entries_view(self, count: int | None = None) -> np.ndarray:
        """numpy view of entries [0, count) (the writer's count by default)."""
        n = self.count if count is None else count
        return np.frombuffer(self.mm, dtype=fmt.ENTRY_DTYPE, count=n, offset=self.entries_pos)

    def slots_view(self) -> np.ndarray:
        return np.frombuffer(self.mm, dtype="<u4", count=self.slots, offset=fmt.HEADER_BYTES)

    def info(self) -> dict:
        flags, end, count, used, min_d, max_d = fmt.peek_counters(self.mm)
        lo, hi = fmt.time_range(self.base_ts, min_d, max_d)
        return {
            "name": self.name,
            "path": str(self.path),
            "entries": count - 1,
            "capacity": self.capacity - 1,
            "slots": self.slots,
            "used_slots": used,
            "begin_timestamp": lo if count > 1 else None,
            "end_timestamp": hi if count > 1 else None,
            "begin_offset": self.begin_offset,
            "end_offset": end if count > 1 else None,
            "sealed": bool(flags & _SEALED),
            "size": len(self.mm),
        }

