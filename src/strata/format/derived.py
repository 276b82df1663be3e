"""The derived-files summary (``<store>/derived``): what the consume queues and the key index
held when the last checkpoint was written, so that an open can tell a derived file that went
missing, lost units or entries, or was zeroed, from one that is whole, without reading the
commit log (pure layout, no I/O; docs/format.md "Derived-files summary").

Layout (little-endian)::

     0  8s  magic          DERIVED_MAGIC
     8  u32 version        1
    12  u32 queue_count
    16  u32 index_file_count
    20  u32 reserved       0
    24  i64 index_end      one past the largest commit-log offset the key index held
    then queue_count queue entries, each:
     0  u32 queue_id
     4  u16 topic_length   bytes of UTF-8 that follow the fixed part
     6  u16 reserved
     8  i64 since          the topic's creation offset (a re-created topic is another queue)
    16  i64 min_offset     first queue offset
    24  i64 end            next queue offset (units [min_offset, end) were durable)
    32  i64 first_phys     commit-log offset of the record of unit min_offset (-1: none)
    40  i64 phys_end       commit-log offset just past the record of unit end - 1
    48  topic bytes
    then index_file_count key-index file entries, each:
     0  i64 begin_offset   the file's first entry's commit-log offset (its name)
     8  u32 sequence       its name's sequence (0 unless one message filled a file)
    12  u32 reserved
    16  i64 end_offset     commit-log offset of its newest entry
    and a u32 CRC32C of every byte before it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

DERIVED_MAGIC = b"STRATADS"
DERIVED_VERSION = 1

_HEAD = struct.Struct("<8sIIIIq")
_QUEUE = struct.Struct("<IHHqqqqq")
_FILE = struct.Struct("<qIIq")
_CRC = struct.Struct("<I")


@dataclass(frozen=True)
class QueueEnd:
    """What one consume queue held at the checkpoint."""

    topic: str
    queue_id: int
    since: int
    min_offset: int
    end: int
    first_phys: int
    phys_end: int


@dataclass(frozen=True)
class IndexFileEnd:
    """One key-index file at the checkpoint."""

    begin_offset: int
    sequence: int
    end_offset: int


@dataclass(frozen=True)
class DerivedSummary:
    queues: tuple[QueueEnd, ...] = ()
    index_files: tuple[IndexFileEnd, ...] = ()
    index_end: int = 0

    def encode(self) -> bytes:
        parts = [_HEAD.pack(DERIVED_MAGIC, DERIVED_VERSION, len(self.queues),
                            len(self.index_files), 0, self.index_end)]
        for q in self.queues:
            name = q.topic.encode()
            parts.append(_QUEUE.pack(q.queue_id, len(name), 0, q.since, q.min_offset, q.end,
                                     q.first_phys, q.phys_end))
            parts.append(name)
        for f in self.index_files:
            parts.append(_FILE.pack(f.begin_offset, f.sequence, 0, f.end_offset))
        raw = b"".join(parts)
        return raw + _CRC.pack(crc32c(raw))

    @classmethod
    def decode(cls, raw: bytes) -> "DerivedSummary":
        """ValueError naming the problem for anything that is not a whole summary."""
        if len(raw) < _HEAD.size + _CRC.size or raw[:8] != DERIVED_MAGIC:
            raise ValueError("not a strata derived-files summary")
        (crc,) = _CRC.unpack_from(raw, len(raw) - _CRC.size)
        if crc != crc32c(raw[:-_CRC.size]):
            raise ValueError("derived-files summary checksum mismatch")
        _m, version, nq, nf, _r, index_end = _HEAD.unpack_from(raw)
        if version != DERIVED_VERSION:
            raise ValueError(f"derived-files summary version {version} is not known")
        pos, queues = _HEAD.size, []
        try:
            for _ in range(nq):
                qid, tlen, _r, since, mino, end, first, phys_end = _QUEUE.unpack_from(raw, pos)
                pos += _QUEUE.size
                topic = raw[pos:pos + tlen].decode()
                pos += tlen
                queues.append(QueueEnd(topic, qid, since, mino, end, first, phys_end))
            files = []
            for _ in range(nf):
                begin, seq, _r, end_offset = _FILE.unpack_from(raw, pos)
                pos += _FILE.size
                files.append(IndexFileEnd(begin, seq, end_offset))
        except (struct.error, UnicodeDecodeError) as exc:
            raise ValueError(f"derived-files summary is malformed: {exc}") from None
        if pos != len(raw) - _CRC.size:
            raise ValueError("derived-files summary has trailing bytes")
        return cls(tuple(queues), tuple(files), index_end)
