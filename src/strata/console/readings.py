"""One reading of a store for the console: every queue's bounds indexed by topic, the
counters a chart's point is made of, the disk use of a directory. Plain data and the loops
that make it, no store calls of their own (``strata.console.views`` makes those)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def dir_bytes(path: Path | str) -> tuple[int, int]:
    """(bytes, files) under ``path`` (allocated size of sparse files counts as written);
    ``os.scandir``, whose entries know their type, so only files are stat'ed."""
    total = files = 0
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):   # deleted by retention meanwhile
        return 0, 0
    for e in entries:
        try:
            if e.is_dir(follow_symlinks=False):
                b, n = dir_bytes(e.path)
                total += b
                files += n
            elif e.is_file(follow_symlinks=False):
                total += e.stat(follow_symlinks=False).st_blocks * 512
                files += 1
        except FileNotFoundError:
            continue
    return total, files


@dataclass
class Sample:
    """One reading of the counters the charts derive their rates from."""

    t_ms: int
    log_end: int                       # commit-log bytes confirmed
    messages: int                      # sum of every queue's max offset
    consumed: int                      # sum of every group queue's committed offset
    per_topic: dict[str, int] = field(default_factory=dict)   # topic -> sum of max offsets
    group_lag: dict[str, int] = field(default_factory=dict)   # group -> lag over its queues


class Reading:
    """A reading of every queue (rows sorted by topic and queue, as ``queue_bounds`` gives
    them) indexed in one pass: each topic's first row and its max offsets' sum. ``get``
    finds a queue's (min, max) from them, where a dict of 8,000 queues cost the sampler a
    millisecond a sample to build."""

    def __init__(self, rows: list[tuple[str, int, int, int]]) -> None:
        self.rows = rows
        self.first: dict[str, int] = {}
        self.per_topic: dict[str, int] = {}
        first, per = self.first, self.per_topic
        for i, (t, _q, _lo, hi) in enumerate(rows):
            if t in per:
                per[t] += hi
            else:
                first[t], per[t] = i, hi

    def get(self, key: tuple[str, int], default: tuple[int, int] = (0, 0)) -> tuple[int, int]:
        t, q = key
        i = self.first.get(t)
        if i is None or q < 0 or i + q >= len(self.rows):
            return default
        row = self.rows[i + q]
        return (row[2], row[3]) if row[0] == t and row[1] == q else default
