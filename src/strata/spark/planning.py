"""Resolve options against a store into per-queue offset ranges, and split them (no Spark)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from strata.spark.options import EARLIEST, LATEST, OptionError, ReadOptions


@dataclass(frozen=True)
class QueueRange:
    topic: str
    queue_id: int
    start: int  # first queue offset to read
    end: int    # one past the last

    @property
    def size(self) -> int:
        return self.end - self.start


def selected_queues(store, o: ReadOptions) -> list[tuple[str, int]]:
    topics = store.topics()
    if o.subscribe is not None:
        missing = [t for t in o.subscribe if t not in topics]
        if missing:
            raise OptionError("subscribe", f"no topic {missing[0]!r} in the store at {o.path or o.tier_url} "
                                           f"(topics: {', '.join(topics) or 'none'})")
        chosen = list(dict.fromkeys(o.subscribe))
        return [(t, q) for t in chosen for q in range(store.queue_count(t))]
    if o.subscribe_pattern is not None:
        rx = re.compile(o.subscribe_pattern)
        return [(t, q) for t in topics if rx.fullmatch(t) for q in range(store.queue_count(t))]
    out = []
    for t, qs in o.assign.items():
        n = store.queue_count(t)
        if n == 0:
            raise OptionError("assign", f"no topic {t!r} in the store at {o.path or o.tier_url}")
        for q in qs:
            if q >= n:
                raise OptionError("assign", f"topic {t!r} has {n} queues; there is no queue {q}")
            out.append((t, q))
    return out


def _check_json_queues(spec, name: str, queues: set[tuple[str, int]]) -> None:
    if isinstance(spec, dict):
        for t, per in spec.items():
            for q in per:
                if (t, q) not in queues:
                    raise OptionError(name, f"{t}/{q} is not one of the queues read "
                                            "(check subscribe/assign)")


def _time_spec(o: ReadOptions, t: str, q: int, starting: bool) -> tuple[str, int] | None:
    """(option name, timestamp ms) that decides this queue's start (or end), if any: Kafka's
    precedence — the one timestamp, then the per-queue JSON, then the offset options."""
    one = o.starting_timestamp if starting else o.ending_timestamp
    if one is not None:
        return ("startingTimestamp" if starting else "endingTimestamp"), one
    per = o.starting_by_timestamp if starting else o.ending_by_timestamp
    if per is not None and q in per.get(t, {}):
        return ("startingOffsetsByTimestamp" if starting else "endingOffsetsByTimestamp"), \
            per[t][q]
    return None


def resolve_ranges(store, o: ReadOptions, pushed=None) -> list[QueueRange]:
    """Start/end offsets per selected queue, checked against the queues' current bounds.

    Timestamps resolve per queue to the first offset whose store time is >= the timestamp
    (Kafka's rule; for an end, the offset is exclusive). ``pushed`` (a pushdown.PushedFilters)
    drops queues and cuts ranges after the options have been resolved and checked."""
    queues = selected_queues(store, o)
    qset = set(queues)
    _check_json_queues(o.starting, "startingOffsets", qset)
    _check_json_queues(o.ending, "endingOffsets", qset)
    _check_json_queues(o.starting_by_timestamp, "startingOffsetsByTimestamp", qset)
    _check_json_queues(o.ending_by_timestamp, "endingOffsetsByTimestamp", qset)
    if pushed is not None:
        queues = [(t, q) for t, q in queues if pushed.keeps(t, q)]
    out = []
    for t, q in queues:
        mn, mx = store.min_offset(t, q), store.max_offset(t, q)
        s = o.starting if isinstance(o.starting, str) else o.starting.get(t, {}).get(q, EARLIEST)
        e = o.ending if isinstance(o.ending, str) else o.ending.get(t, {}).get(q, LATEST)
        start = mn if s in ("earliest", EARLIEST) else mx if s in ("latest", LATEST) else s
        end = mx if e in ("latest", LATEST) else e
        start_name = "startingOffsets"
        by_time = _time_spec(o, t, q, starting=True)
        if by_time is not None:
            start_name, ts = by_time
            start = store.offset_for_time(t, q, ts, "lower")
            if start >= mx:  # no message stored at or after ts
                if o.starting_timestamp_strategy == "error":
                    raise OptionError(start_name, f"{t}/{q} has no message stored at or after "
                                                  f"{ts} ms (set startingOffsetsByTimestamp"
                                                  "Strategy=latest to start at the latest "
                                                  "offset instead)")
                start = mx
        by_time = _time_spec(o, t, q, starting=False)
        if by_time is not None:  # no message at or after ts: the end is the latest offset
            end = min(mx, store.offset_for_time(t, q, by_time[1], "lower"))
        if start < mn:
            if o.fail_on_data_loss:
                raise OptionError("startingOffsets",
                                  f"{t}/{q} offset {start} is below the queue's earliest offset "
                                  f"{mn}: offsets {start}..{mn - 1} are no longer stored (set "
                                  "failOnDataLoss=false to start at the earliest)")
            start = mn
        if end > mx:
            raise OptionError("endingOffsets", f"{t}/{q} offset {end} is beyond the queue's "
                                               f"latest offset {mx}")
        if start > end:
            raise OptionError(start_name, f"{t}/{q} starting offset {start} is after the "
                                          f"ending offset {end}")
        r = QueueRange(t, q, start, end)
        out.append(r if pushed is None else pushed.narrow(store, r))
    return out


def split_ranges(ranges: list[QueueRange], min_partitions: int | None) -> list[QueueRange]:
    """Drop empty ranges; split the rest so there are at least ``min_partitions`` (Kafka-like:
    each range gets a share proportional to its size, never an empty piece)."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    # shares proportional to size (largest remainder), at least 1 and at most size per range
    shares = [r.size * min_partitions / total for r in ranges]
    counts = [max(1, min(r.size, int(sh))) for r, sh in zip(ranges, shares)]
    order = sorted(range(len(ranges)), key=lambda i: counts[i] - shares[i])
    while sum(counts) < min_partitions:
        grown = False
        for i in order:
            if sum(counts) >= min_partitions:
                break
            if counts[i] < ranges[i].size:
                counts[i] += 1
                grown = True
        if not grown:  # every range is already split into single offsets
            break
    out = []
    for r, parts in zip(ranges, counts):
        step, extra = divmod(r.size, parts)
        s = r.start
        for i in range(parts):
            e = s + step + (1 if i < extra else 0)
            out.append(QueueRange(r.topic, r.queue_id, s, e))
            s = e
    return out


def pack_ranges(ranges: list[QueueRange], max_rows: int) -> list[list[QueueRange]]:
    """Group queue ranges into tasks of at most ``max_rows`` offsets (first fit, largest range
    first); a range that big or bigger is a task of its own. Empty ranges are dropped; every
    range lands in exactly one task."""
    groups: list[list[QueueRange]] = []
    sizes: list[int] = []
    for r in sorted((r for r in ranges if r.size > 0), key=lambda r: (-r.size, r.topic,
                                                                      r.queue_id)):
        for i, used in enumerate(sizes):
            if used + r.size <= max_rows:
                groups[i].append(r)
                sizes[i] += r.size
                break
        else:
            groups.append([r])
            sizes.append(r.size)
    return groups


def log_regions(store, ranges: list[QueueRange], parts: int) -> list[list[QueueRange]]:
    """Cut ``ranges`` into ``parts`` tasks by commit-log position: task k holds, of every range,
    the offsets whose records lie in the k-th stretch of the log, the stretches chosen so the
    tasks get about equal numbers of offsets. A task then reads its ranges together in log order
    (log_order.py), sweeping one stretch of the log instead of the whole log once per queue.

    Where each range's offsets lie in the log comes from a few sampled consume-queue units, so a
    cut is exact to within a sample's spacing; every offset still lands in exactly one task."""
    import numpy as np

    ranges = [r for r in ranges if r.size > 0]
    if parts <= 1 or not ranges:
        return [ranges] if ranges else []
    per_range = max(4, REGION_SAMPLES // len(ranges))
    sampled = []   # (queue offsets, their commit-log offsets) per range
    for r in ranges:
        k = min(r.size, per_range)
        offs = r.start + (np.arange(k, dtype=np.int64) * r.size) // k
        phys = store.queues.get(r.topic, r.queue_id).commitlog_offsets_at(offs)
        phys = np.maximum.accumulate(phys)   # a blank or unreadable unit must not go backwards
        sampled.append((offs, phys))
    # every sample stands for the offsets up to the range's next sample
    weights = np.concatenate([np.diff(np.r_[offs, r.end]) for r, (offs, _) in zip(ranges,
                                                                                 sampled)])
    at = np.concatenate([phys for _, phys in sampled])
    order = np.argsort(at, kind="stable")
    before = np.cumsum(weights[order]) - weights[order]   # offsets lying earlier in the log
    total = int(weights.sum())
    cuts = [int(at[order][np.searchsorted(before, total * k / parts, side="left")])
            if total * k / parts <= before[-1] else int(at.max()) + 1 for k in range(1, parts)]
    tasks: list[list[QueueRange]] = [[] for _ in range(parts)]
    for r, (offs, phys) in zip(ranges, sampled):
        bounds = [r.start] + [int(offs[i]) if i < len(offs) else r.end
                              for i in np.searchsorted(phys, cuts, side="left")] + [r.end]
        for k, (s, e) in enumerate(zip(bounds, bounds[1:])):
            if e > s:
                tasks[k].append(QueueRange(r.topic, r.queue_id, s, e))
    return [t for t in tasks if t]


# How many consume-queue units log_regions samples in all (at least 4 per range).
REGION_SAMPLES = 4096


def plan_tasks(store, ranges: list[QueueRange], min_partitions: int | None,
               task_rows: int) -> list[list[QueueRange]]:
    """The Spark tasks of a read. With ``minPartitions``, ranges split until there are that
    many, one range per task (Kafka's rule). Without, as many tasks as packing the ranges into
    tasks of up to ``task_rows`` offsets gives (every task of a Python data source has a fixed
    cost of tens of ms that many small tasks would pay again and again; a range that large or
    larger counts as a task of its own), each task one stretch of the log across all the
    ranges (log_regions)."""
    if min_partitions:
        return [[r] for r in split_ranges(ranges, min_partitions)]
    return log_regions(store, ranges, len(pack_ranges(ranges, task_rows)))
