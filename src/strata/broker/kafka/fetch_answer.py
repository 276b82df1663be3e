"""The Fetch answer (versions 4-12) and its own encoder: every size is known before writing,
so the frame is one buffer allocated once, its fixed fields packed in place and each
partition's record batches written straight into it by the compiled batch writer
(``record_batch._write``) from the store's buffers.
"""

from __future__ import annotations

import struct

import numpy as np

from strata.broker.kafka import errors as ke
from strata.broker.kafka import record_batch as rb


class PartitionAnswer:
    """One partition of the answer: its codes and offsets, and the record batches to write
    (None: null records, as on an error). ``next_offset`` is the offset a following Fetch
    asks for (after the last record written; -1 unknown), ``at`` where its fields start in
    the encoded frame (so a prepared answer's high watermark can be brought up to date)."""

    __slots__ = ("partition_index", "error_code", "high_watermark", "log_start_offset",
                 "pieces", "size", "next_offset", "at")

    def __init__(self, partition_index: int, error_code: int, high_watermark: int = -1,
                 log_start_offset: int = -1, pieces: list | None = None) -> None:
        self.partition_index = partition_index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset
        self.pieces = pieces
        self.size = sum(pc[1][3] for pc in pieces) if pieces else 0
        self.next_offset = -1
        self.at = -1


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">iihi")         # frame size, correlation id, error code, session id
_PART_V5 = struct.Struct(">ihqqqi")    # index, error, hw, last stable, log start, aborted
_PART_V4 = struct.Struct(">ihqqi")     # the same without the log start offset
_I32x2 = struct.Struct(">ii")
_HW = struct.Struct(">qq")             # high watermark, last stable offset
_Q = struct.Struct(">q")


def _uvarint_len(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def _put_uvarint(out: np.ndarray, at: int, n: int) -> int:
    while n >= 0x80:
        out[at] = (n & 0x7F) | 0x80
        n >>= 7
        at += 1
    out[at] = n
    return at + 1


class FetchAnswer:
    """A Fetch response (versions 4-12) that encodes itself: every size is known before
    writing, so the frame is one buffer allocated once, its fixed fields packed in place
    and each partition's record batches written straight into it by the compiled batch
    writer (``record_batch._write``) from the store's buffers — no intermediate bytes per
    partition and no generic encoder regrowing its output. ``api.encode_response`` calls
    ``encode_framed``. An answer encodes once (on its connection's read lane, off the event loop);
    asked again, it returns the same frame with the correlation id written in, so an answer
    prepared ahead is sent without encoding on the loop."""

    __slots__ = ("topics", "framed", "version", "after_sent")

    def __init__(self, topics: list[tuple[str, list[PartitionAnswer]]]) -> None:
        self.topics = topics
        self.framed: np.ndarray | None = None
        self.version = -1
        self.after_sent = None          # called once the frame is handed to the socket

    def size(self) -> int:
        """The record bytes of every partition."""
        return sum(p.size for _t, parts in self.topics for p in parts)

    def set_watermarks(self, p: PartitionAnswer, high_watermark: int,
                       log_start_offset: int) -> None:
        """Bring partition ``p``'s high watermark and log start up to date, in the frame
        too when it is encoded (a prepared answer, read before the latest dispatch)."""
        p.high_watermark, p.log_start_offset = high_watermark, log_start_offset
        if self.framed is not None:
            _HW.pack_into(self.framed, p.at + 6, high_watermark, high_watermark)
            if self.version >= 5:
                _Q.pack_into(self.framed, p.at + 22, log_start_offset)

    def has_error(self, but: int | None = None) -> bool:
        """Whether a partition answers an error (other than ``but``)."""
        return any(p.error_code not in (ke.NONE, but)
                   for _t, parts in self.topics for p in parts)

    def encode_framed(self, version: int, correlation_id: int) -> memoryview:
        if self.framed is not None and self.version == version:
            _I32.pack_into(self.framed, 4, correlation_id)
            return memoryview(self.framed)
        if not 4 <= version <= 12:
            raise ValueError(f"Fetch v{version} is not encoded here")
        flex = version >= 12
        names = [t.encode("utf-8") for t, _p in self.topics]
        # sizes first
        size = 4 + 4 + (1 if flex else 0)                     # size, correlation id, tags
        size += 4 + (6 if version >= 7 else 0)                # throttle, error, session
        size += _uvarint_len(len(self.topics) + 1) if flex else 4
        part_fixed = 4 + 2 + 8 + 8 + (8 if version >= 5 else 0) + (1 if flex else 4) + \
            (4 if version >= 11 else 0)
        for name, (_t, parts) in zip(names, self.topics):
            size += (_uvarint_len(len(name) + 1) if flex else 2) + len(name)
            size += _uvarint_len(len(parts) + 1) if flex else 4
            for p in parts:
                size += part_fixed + p.size
                if flex:
                    size += 1 + (_uvarint_len(p.size + 1) if p.pieces is not None else 1)
                else:
                    size += 4
            size += 1 if flex else 0
        size += 1 if flex else 0
        out = np.empty(size, np.uint8)
        # then write
        if version >= 7:
            _HEAD.pack_into(out, 0, size - 4, correlation_id, 0, 0)   # throttle = 0
            at = 4 + 4
            if flex:
                out[at] = 0
                at += 1
            _I32.pack_into(out, at, 0)
            _I16.pack_into(out, at + 4, ke.NONE)
            _I32.pack_into(out, at + 6, 0)
            at += 10
        else:
            _I32x2.pack_into(out, 0, size - 4, correlation_id)
            _I32.pack_into(out, 8, 0)
            at = 12
        if flex:
            at = _put_uvarint(out, at, len(self.topics) + 1)
        else:
            _I32.pack_into(out, at, len(self.topics))
            at += 4
        for name, (_t, parts) in zip(names, self.topics):
            if flex:
                at = _put_uvarint(out, at, len(name) + 1)
            else:
                _I16.pack_into(out, at, len(name))
                at += 2
            out[at:at + len(name)] = np.frombuffer(name, np.uint8)
            at += len(name)
            if flex:
                at = _put_uvarint(out, at, len(parts) + 1)
            else:
                _I32.pack_into(out, at, len(parts))
                at += 4
            for p in parts:
                hw = p.high_watermark
                p.at = at
                if version >= 5:
                    _PART_V5.pack_into(out, at, p.partition_index, p.error_code, hw, hw,
                                       p.log_start_offset, -1)
                    at += _PART_V5.size
                else:                          # no log start offset before v5
                    _PART_V4.pack_into(out, at, p.partition_index, p.error_code, hw, hw, -1)
                    at += _PART_V4.size
                if flex:                       # compact nullable array: 0 is null
                    at -= 4
                    out[at] = 0
                    at += 1
                if version >= 11:
                    _I32.pack_into(out, at, -1)          # preferred read replica
                    at += 4
                if p.pieces is None:
                    if flex:
                        out[at] = 0
                        at += 1
                    else:
                        _I32.pack_into(out, at, -1)
                        at += 4
                else:
                    if flex:
                        at = _put_uvarint(out, at, p.size + 1)
                    else:
                        _I32.pack_into(out, at, p.size)
                        at += 4
                    for cols, plan, bases in p.pieces:
                        at = rb._write(out, at, cols, plan, bases)
                if flex:
                    out[at] = 0
                    at += 1
            if flex:
                out[at] = 0
                at += 1
        if flex:
            out[at] = 0
            at += 1
        if at != size:
            raise AssertionError(f"Fetch answer: wrote {at} of {size} bytes")
        self.framed, self.version = out, version
        return memoryview(out)
