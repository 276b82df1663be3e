"""Buffers for the Fetch answers' frames, reused once nothing holds them.

A consumer reading a backlog gets answers of megabytes (``max.partition.fetch.bytes`` per
partition), each encoded into a frame of its own. A fresh ``np.empty`` of that size comes
from the kernel as untouched pages: the batch writer's copies then fault every page in, and
the allocator hands the pages back once the frame is sent. Measured on the consume bench
(``perf``, 2 consumers, 100 B): ~7 % of the broker's CPU was those page faults.

So frames of ``MIN_POOLED`` bytes and more are views of pooled buffers (sizes rounded up to a
power of two). A buffer is free again when nothing but the pool refers to it: the frame view,
the answer that keeps it, the memoryview the event loop writes and the transport's queued
write each hold a reference, so ``sys.getrefcount`` says whether any of them is still alive.
A buffer in use is never handed out twice: the check and the taking of the view happen under
one lock, and a view holds its buffer from the moment it exists. When every pooled buffer of
a size is in use, or the pool holds ``MAX_POOLED_BYTES``, the frame gets a buffer of its own.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

MIN_POOLED = 256 << 10            # smaller frames: malloc's own free lists serve them well
MAX_POOLED_BYTES = 64 << 20       # at most this much kept for reuse, in all
_FREE_REFS = 2                    # the pool's list, getrefcount's argument

_lock = threading.Lock()
_pool: dict[int, list[np.ndarray]] = {}     # rounded size -> its buffers
_pooled_bytes = 0


def take(size: int) -> np.ndarray:
    """A writable uint8 array of ``size`` bytes (contents undefined), a view of a pooled
    buffer when one is free."""
    global _pooled_bytes
    if size < MIN_POOLED:
        return np.empty(size, np.uint8)
    cap = 1 << (size - 1).bit_length()
    with _lock:
        bufs = _pool.setdefault(cap, [])
        for i in range(len(bufs)):
            if sys.getrefcount(bufs[i]) == _FREE_REFS:
                return bufs[i][:size]
        buf = np.empty(cap, np.uint8)
        if _pooled_bytes + cap <= MAX_POOLED_BYTES:
            bufs.append(buf)
            _pooled_bytes += cap
        return buf[:size]


def pooled_bytes() -> int:
    """Bytes the pool keeps (in use or free)."""
    return _pooled_bytes


def clear() -> None:
    """Forget every pooled buffer (frames still alive keep theirs)."""
    global _pooled_bytes
    with _lock:
        _pool.clear()
        _pooled_bytes = 0
