"""The one binary search over store time: a queue's messages are stored in time order, so the
offset of a time is found by bisecting the queue offsets (the local consume queue and the
tier's chunks both use it)."""

from __future__ import annotations

from typing import Callable

BOUNDARIES = ("lower", "upper")


def offset_for_time(lo: int, hi: int, time_at: Callable[[int], int], timestamp_ms: int,
                    boundary: str) -> int:
    """Over queue offsets [lo, hi) whose store times ``time_at(offset)`` do not decrease:
    ``lower`` = the first offset stored at or after ``timestamp_ms`` (``hi`` if none),
    ``upper`` = the last one stored at or before it (``lo`` if none: before the first
    message, the first offset)."""
    first = lo
    upper = boundary == "upper"
    while lo < hi:
        mid = (lo + hi) // 2
        t = time_at(mid)
        if t < timestamp_ms or (upper and t == timestamp_ms):
            lo = mid + 1
        else:
            hi = mid
    if not upper:
        return lo
    return lo - 1 if lo > first else first
