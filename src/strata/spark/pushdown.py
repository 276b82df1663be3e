"""Filter pushdown for batch reads: Spark's filters -> fewer queues, shorter offset ranges,
skipped consume-queue units.

| filter | effect | Spark re-checks |
|---|---|---|
| ``topic`` =, <=>, IN | only those topics' queues are planned | no (exact) |
| ``queue_id`` =, <=>, IN | only those queues | no (exact) |
| ``queue_offset`` =, <, <=, >, >= | offset ranges cut | no (exact) |
| ``queue_offset`` IN | ranges cut to [min, max] | yes |
| ``timestamp`` =, <, <=, >, >= | ranges cut with the store's time lookup (store time is monotonic within a queue) | yes |
| ``tags`` =, IN | units whose tag hash differs are skipped before any record is read | yes (hashes collide) |

Everything else goes back to Spark untouched.

Spark calls ``pushFilters`` only when ``spark.sql.python.filterPushdown.enabled`` is true, and
when it is false PySpark refuses every read by a reader class that overrides ``pushFilters``
(``DATA_SOURCE_PUSHDOWN_DISABLED``), even reads without filters. ``PushFiltersHook`` lets one
reader class serve both cases: PySpark's check asks whether ``reader.pushFilters.__func__`` is
the base method, which the hook reports, while a call still reaches strata's implementation.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, replace

from pyspark.sql.datasource import (DataSourceReader, EqualNullSafe, EqualTo, Filter,
                                    GreaterThan, GreaterThanOrEqual, In, LessThan,
                                    LessThanOrEqual)

from strata.format.consume_queue import tag_hash
from strata.spark.planning import QueueRange

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_US = _dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class PushedFilters:
    """What the pushed filters allow, as sets and half-open bounds (None = unconstrained)."""
    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    offset_lo: int = 0                 # queue_offset >= offset_lo
    offset_hi: int | None = None       # queue_offset < offset_hi
    time_lo_ms: int | None = None      # store time >= time_lo_ms
    time_hi_ms: int | None = None      # store time < time_hi_ms
    tag_hashes: frozenset[int] | None = None

    def keeps(self, topic: str, queue_id: int) -> bool:
        return (self.topics is None or topic in self.topics) and \
            (self.queue_ids is None or queue_id in self.queue_ids)

    def narrow(self, store, r: QueueRange) -> QueueRange:
        """``r`` cut to the offsets and store times allowed (possibly empty)."""
        start = max(r.start, self.offset_lo)
        end = r.end if self.offset_hi is None else min(r.end, self.offset_hi)
        if start < end and self.time_lo_ms is not None:
            start = max(start, store.offset_for_time(r.topic, r.queue_id, self.time_lo_ms,
                                                     "lower"))
        if start < end and self.time_hi_ms is not None:
            end = min(end, store.offset_for_time(r.topic, r.queue_id, self.time_hi_ms, "lower"))
        return QueueRange(r.topic, r.queue_id, start, max(start, end))


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _micros(v) -> int | None:
    """A pushed TIMESTAMP literal (a datetime, UTC when it has no zone) as µs since the epoch."""
    if not isinstance(v, _dt.datetime):
        return None
    if v.tzinfo is None:
        v = v.replace(tzinfo=_dt.timezone.utc)
    return (v - _EPOCH) // _US


def _meet(a: frozenset | None, b) -> frozenset:
    b = frozenset(b)
    return b if a is None else a & b


def push_filters(filters: list[Filter]) -> tuple[PushedFilters, list[Filter]]:
    """(what the filters allow, the filters Spark must still evaluate — a sub-list of the
    input, same objects)."""
    p = PushedFilters()
    rest: list[Filter] = []
    for f in filters:
        col = f.attribute[0] if len(getattr(f, "attribute", ())) == 1 else None
        value = getattr(f, "value", None)
        handled = False
        if col == "topic":
            if isinstance(f, (EqualTo, EqualNullSafe)) and isinstance(value, str):
                p, handled = replace(p, topics=_meet(p.topics, [value])), True
            elif isinstance(f, In) and all(isinstance(v, str) or v is None for v in value):
                p, handled = replace(p, topics=_meet(p.topics, [v for v in value if v])), True
        elif col == "queue_id":
            if isinstance(f, (EqualTo, EqualNullSafe)) and _int(value):
                p, handled = replace(p, queue_ids=_meet(p.queue_ids, [value])), True
            elif isinstance(f, In) and all(_int(v) or v is None for v in value):
                p = replace(p, queue_ids=_meet(p.queue_ids, [v for v in value if v is not None]))
                handled = True
        elif col == "queue_offset":
            lo, hi = _offset_bounds(f, value)
            if lo is not None:
                p = replace(p, offset_lo=max(p.offset_lo, lo))
            if hi is not None:
                p = replace(p, offset_hi=hi if p.offset_hi is None else min(p.offset_hi, hi))
            handled = (lo is not None or hi is not None) and not isinstance(f, In)
        elif col == "timestamp":
            lo, hi = _time_bounds(f, value)
            if lo is not None:
                p = replace(p, time_lo_ms=lo if p.time_lo_ms is None else max(p.time_lo_ms, lo))
            if hi is not None:
                p = replace(p, time_hi_ms=hi if p.time_hi_ms is None else min(p.time_hi_ms, hi))
        elif col == "tags":
            if isinstance(f, EqualTo) and isinstance(value, str):
                p = replace(p, tag_hashes=_meet(p.tag_hashes, [tag_hash(value)]))
            elif isinstance(f, In) and all(isinstance(v, str) or v is None for v in value):
                p = replace(p, tag_hashes=_meet(p.tag_hashes,
                                                [tag_hash(v) for v in value if v is not None]))
        if not handled:
            rest.append(f)
    return p, rest


def _offset_bounds(f: Filter, v) -> tuple[int | None, int | None]:
    """[lo, hi) of queue offsets a queue_offset filter allows; (None, None) if not usable."""
    if isinstance(f, In):
        vals = [x for x in v if x is not None]
        if not vals or not all(_int(x) for x in vals):
            return None, None
        return min(vals), max(vals) + 1
    if not _int(v):
        return None, None
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return v, v + 1
    if isinstance(f, GreaterThan):
        return v + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return v, None
    if isinstance(f, LessThan):
        return None, v
    if isinstance(f, LessThanOrEqual):
        return None, v + 1
    return None, None


def _time_bounds(f: Filter, v) -> tuple[int | None, int | None]:
    """[lo, hi) of store times (ms) a timestamp filter allows. The column holds ms·1000 µs."""
    us = _micros(v)
    if us is None:
        return None, None
    floor_ms, ceil_ms = us // 1000, -(-us // 1000)
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return ceil_ms, floor_ms + 1
    if isinstance(f, GreaterThan):
        return floor_ms + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return ceil_ms, None
    if isinstance(f, LessThan):
        return None, ceil_ms
    if isinstance(f, LessThanOrEqual):
        return None, floor_ms + 1
    return None, None


class _BoundPushFilters:
    """``reader.pushFilters`` as PySpark sees it: reports the base method as its ``__func__``
    (so a read with Spark's pushdown off is not refused) and calls the reader's
    ``push_filters`` when Spark's pushdown is on."""

    def __init__(self, reader) -> None:
        self.__func__ = DataSourceReader.pushFilters
        self._reader = reader

    def __call__(self, filters):
        return self._reader.push_filters(filters)


class PushFiltersHook:
    """Class attribute ``pushFilters = PushFiltersHook()`` on a reader with ``push_filters``."""

    def __get__(self, reader, owner=None):
        if reader is None:
            return DataSourceReader.pushFilters
        return _BoundPushFilters(reader)
