"""``strata serve`` asks the C allocator to keep freed memory for reuse.

A broker allocates and frees buffers of hundreds of kilobytes to megabytes all the time: a
Fetch answer's frame and record tables, the store's read buffers, a Produce's decoded
columns. glibc serves blocks over its mmap threshold (128 KiB at first) with fresh pages
from the kernel and hands freed memory at the top of its heaps back once more than the trim
threshold is free, so the next block of that size faults every page in again. Measured on
the Kafka consume bench (2 consumers, 100 B, ``perf``): the page faults and page clearing
were ~7 % of the broker's CPU, and the store-side read and encode of a Fetch ran ~25 % faster
in-process with the thresholds below.

So the server process (not a program embedding the store: its allocator is its own) sets
glibc's mmap threshold to ``MMAP_THRESHOLD`` and its trim threshold to ``TRIM_THRESHOLD``:
freed blocks stay in the process for the next request. The cost is memory: up to that much
freed memory per heap stays mapped after a burst. Anything the operator set already
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, a ``glibc.malloc`` tunable in
``GLIBC_TUNABLES``) is left as it is, and on a C library other than glibc nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1           # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 64 << 20       # blocks below this come from the heaps, reused when freed
TRIM_THRESHOLD = 256 << 20      # free memory kept at a heap's top before it goes back
_OPERATOR_SET = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory() -> bool:
    """Set the thresholds (glibc only, unless the environment sets them); whether set."""
    if platform.libc_ver()[0] != "glibc":
        return False
    if any(name in os.environ for name in _OPERATOR_SET) or \
            "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        libc = ctypes.CDLL(None)
        done = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and \
            libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    except (OSError, AttributeError) as exc:      # no mallopt in this process's C library
        log.debug("mallopt unavailable: %s", exc)
        return False
    return done
