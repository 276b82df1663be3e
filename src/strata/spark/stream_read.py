"""Structured Streaming read: ``spark.readStream.format("strata")``, Kafka-like per-queue offsets.

An offset is ``{"topic": {"queue id": next queue offset}}`` with topics sorted by name and queue
ids by number, so equal positions always serialise to the same JSON (Spark compares offsets as
text). The offset arithmetic — splitting a row limit across queues, deciding what data loss
happened, whether to wait for more rows — is plain Python at the top of this module; the
``StrataStreamReader`` below only opens the store and applies it.

Where things run: every method except ``read`` runs in one long-lived driver-side Python process
per query, so the reader may keep state there (the AvailableNow target, the time of the last
batch). ``read`` runs in executors on a fresh reader, so partitions carry all they need.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Mapping

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              ReadMinRows, SupportsTriggerAvailableNow)
from pyspark.sql.types import StructType

from strata.errors import InvalidInputError, StrataError
from strata.spark.options import OptionError, StreamReadOptions
from strata.spark.planning import (QueueRange, plan_tasks, resolve_ranges,
                                  selected_queues)
from strata.spark.source import RangesPartition, read_ranges
from strata.spark.schema import ALL_COLUMNS, arrow_schema

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]          # (topic, queue id)
Offsets = dict[QueueKey, int]       # next queue offset to read, per queue


class DataLossError(StrataError):
    """Offsets a stream had not read yet are gone (retention, deleted or re-created topic)."""


# ------------------------------------------------------------------ offsets <-> JSON

def offsets_to_json(offsets: Mapping[QueueKey, int]) -> dict[str, dict[str, int]]:
    """The Spark offset for ``offsets``: topics by name, queue ids by number (deterministic)."""
    out: dict[str, dict[str, int]] = {}
    for topic, queue_id in sorted(offsets):
        out.setdefault(topic, {})[str(queue_id)] = int(offsets[(topic, queue_id)])
    return out


def offsets_from_json(value) -> Offsets:
    """Parse an offset Spark hands back (from this reader or from a checkpoint)."""
    if not isinstance(value, dict):
        raise InvalidInputError(f"not a strata stream offset: {value!r}")
    out: Offsets = {}
    for topic, queues in value.items():
        if not isinstance(queues, dict):
            raise InvalidInputError(f"not a strata stream offset: topic {topic!r} maps to "
                                    f"{queues!r}")
        for q, off in queues.items():
            try:
                out[(str(topic), int(q))] = int(off)
            except (TypeError, ValueError):
                raise InvalidInputError(f"not a strata stream offset: {topic}/{q} = {off!r}") \
                    from None
    return out


# ------------------------------------------------------------------ admission control

def split_limit(start: Mapping[QueueKey, int], available: Mapping[QueueKey, int],
                max_rows: int) -> Offsets:
    """End offsets that admit at most ``max_rows`` offsets in total.

    Each queue gets a share of the limit proportional to its backlog (available - start), like
    Kafka's ``maxOffsetsPerTrigger``; shares are whole offsets by the largest-remainder rule, so
    together they are exactly ``min(max_rows, total backlog)``. Ties go to the queue that sorts
    first. No end is below its start or beyond what is available.
    """
    if max_rows < 0:
        raise ValueError(f"max_rows must be >= 0, got {max_rows}")
    keys = sorted(available)
    backlog = {k: max(0, available[k] - start.get(k, available[k])) for k in keys}
    total = sum(backlog.values())
    if total <= max_rows:
        return {k: start.get(k, available[k]) + backlog[k] for k in keys}
    share = {k: max_rows * backlog[k] // total for k in keys}
    left = max_rows - sum(share.values())
    by_remainder = sorted(keys, key=lambda k: -(max_rows * backlog[k] % total))
    for k in by_remainder[:left]:
        share[k] += 1
    return {k: start.get(k, available[k]) + share[k] for k in keys}


# A micro-batch of a trickle touches many queues with a few offsets each; one Spark task per
# queue would cost more than the reading. Ranges below this many offsets share tasks.
SHARED_TASK_ROWS = 65_536


def should_wait(new_rows: int, min_rows: int, since_last_batch_ms: int,
                max_delay_ms: int) -> bool:
    """``minOffsetsPerTrigger``: hold the batch back while fewer than ``min_rows`` offsets are
    new, unless ``maxTriggerDelay`` has passed since the last batch."""
    return new_rows < min_rows and since_last_batch_ms < max_delay_ms


# ------------------------------------------------------------------ data loss

@dataclass(frozen=True)
class DataLoss:
    """Offsets of one queue the stream should have read but cannot."""
    topic: str
    queue_id: int
    first: int            # first lost offset
    end: int | None       # one past the last lost offset; None: unknown (the queue went away)
    why: str

    def describe(self) -> str:
        lost = (f"offsets {self.first}..{self.end - 1}" if self.end is not None
                else f"offsets from {self.first} on")
        return f"{self.topic}/{self.queue_id}: {lost} are lost ({self.why})"


Bounds = dict[QueueKey, "tuple[int, int] | None"]   # (min, max) per queue; None: no longer exists


def reconcile(start: Mapping[QueueKey, int], bounds: Bounds) -> tuple[Offsets, list[DataLoss]]:
    """Where each existing queue of ``bounds`` really continues, and what was lost on the way.

    A queue not in ``start`` is new and starts at its earliest offset (a loss if that is not 0:
    retention removed messages before the stream saw the queue). A start below the queue's
    earliest offset lost the difference; a start beyond its latest offset means the queue was
    reset (topic deleted and created again), so it continues at the earliest. A queue in
    ``start`` whose bound is None no longer exists.
    """
    effective: Offsets = {}
    losses: list[DataLoss] = []
    for key in sorted(bounds):
        b = bounds[key]
        s = start.get(key)
        if b is None:
            if s is not None:
                losses.append(DataLoss(key[0], key[1], s, None,
                                       "the queue no longer exists: topic deleted?"))
            continue
        low, high = b
        if s is None:
            if low > 0:
                losses.append(DataLoss(key[0], key[1], 0, low, "deleted by retention before "
                                       "the stream discovered this new queue"))
            effective[key] = low
        elif s > high:
            losses.append(DataLoss(key[0], key[1], s, None,
                                   f"the queue's latest offset is now {high}, below the "
                                   "stream's position: topic deleted and created again?"))
            effective[key] = low
        elif s < low:
            losses.append(DataLoss(key[0], key[1], s, low, "deleted by retention before the "
                                                            "stream read them"))
            effective[key] = low
        else:
            effective[key] = s
    return effective, losses


def handle_losses(losses: list[DataLoss], fail_on_data_loss: bool) -> None:
    """failOnDataLoss=true: raise naming every lost range; false: log each and carry on."""
    if not losses:
        return
    if fail_on_data_loss:
        raise DataLossError(
            "strata stream: data the query had not read yet is gone: "
            + "; ".join(x.describe() for x in losses)
            + ". Set failOnDataLoss=false to continue at the earliest offsets still stored.")
    for x in losses:
        log.warning("strata stream: %s; continuing at the earliest offset still stored "
                    "(failOnDataLoss=false)", x.describe())


# ------------------------------------------------------------------ the Spark stream reader

def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def check_columns(schema: StructType) -> None:
    unknown = [f.name for f in schema.fields if f.name not in ALL_COLUMNS]
    if unknown:
        raise OptionError("schema", f"the strata source has no column {unknown[0]!r}; "
                                    f"columns: {', '.join(sorted(ALL_COLUMNS))}")


class StrataStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with Kafka's admission control (max/min offsets per trigger,
    maxTriggerDelay) and Trigger.AvailableNow. Holds only options and small driver state; the
    store is opened read-only for each call and closed again, so a store whose writer restarts
    between triggers is always seen as it is now."""

    def __init__(self, options: StreamReadOptions, schema: StructType,
                 clock_ms: Callable[[], int] | None = None) -> None:
        check_columns(schema)
        self.o = options
        self.schema = schema
        self._now_ms = clock_ms or wall_clock_ms
        self._target: Offsets | None = None      # AvailableNow: never read beyond these ends
        self._latest: Offsets | None = None      # what the last latestOffset saw (for progress)
        self._last_batch_ms = self._now_ms()     # maxTriggerDelay counts from here

    # -- store access (driver side)

    def _open(self):
        from strata.spark.geometry import open_readonly
        return open_readonly(self.o.read.path)

    def _current_queues(self, store) -> list[QueueKey]:
        """The queues the options select right now. Unlike a batch read, subscribed topics that
        do not exist (yet) are no error: they are picked up once created (Kafka does the same)."""
        o = self.o.read
        if o.subscribe is not None:
            topics = set(store.topics())
            return [(t, q) for t in dict.fromkeys(o.subscribe) if t in topics
                    for q in range(store.queue_count(t))]
        return selected_queues(store, o)

    def _bounds(self, store, keys: list[QueueKey], start: Mapping[QueueKey, int]) -> Bounds:
        """(min, max) of ``keys``; queues of ``start`` that no longer exist map to None (queues
        that still exist but are no longer selected are left out: the options changed)."""
        bounds: Bounds = {k: (store.min_offset(*k), store.max_offset(*k)) for k in keys}
        for t, q in start:
            if (t, q) not in bounds and q >= store.queue_count(t):
                bounds[(t, q)] = None
        return bounds

    # -- DataSourceStreamReader

    def initialOffset(self) -> dict:
        o = self.o.read
        store = self._open()
        try:
            if o.subscribe is not None:
                topics = set(store.topics())
                existing = tuple(t for t in o.subscribe if t in topics)
                if isinstance(o.starting, dict):
                    for t in o.starting:
                        if t not in existing:
                            raise OptionError("startingOffsets",
                                              f"topic {t!r} is not one of the subscribed topics "
                                              "that exist in the store")
                if not existing:
                    return {}
                o = replace(o, subscribe=existing)
            if isinstance(o.starting, dict):
                for t, per in o.starting.items():
                    for q, off in per.items():
                        if off >= 0 and q < store.queue_count(t) and off > store.max_offset(t, q):
                            raise OptionError("startingOffsets",
                                              f"{t}/{q} offset {off} is beyond the queue's "
                                              f"latest offset {store.max_offset(t, q)}")
            ranges = resolve_ranges(store, replace(o, ending="latest"))
        finally:
            store.close()
        return offsets_to_json({(r.topic, r.queue_id): r.start for r in ranges})

    def prepareForTriggerAvailableNow(self) -> None:
        store = self._open()
        try:
            self._target = {k: store.max_offset(*k) for k in self._current_queues(store)}
        finally:
            store.close()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.o.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.o.max_offsets_per_trigger)
        if self.o.min_offsets_per_trigger is not None:
            return ReadMinRows(self.o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        store = self._open()
        try:
            keys = self._current_queues(store)
            if self._target is not None:   # AvailableNow: no queue found after the snapshot
                keys = [k for k in keys if k in self._target or k in begin]
            bounds = self._bounds(store, keys, begin)
        finally:
            store.close()
        effective, losses = reconcile(begin, bounds)
        handle_losses(losses, self.o.read.fail_on_data_loss)
        available = {k: bounds[k][1] for k in effective}
        if self._target is not None:
            available = {k: min(v, self._target.get(k, effective[k])) for k, v in available.items()}
        available = {k: max(v, effective[k]) for k, v in available.items()}
        self._latest = available

        if isinstance(limit, ReadAllAvailable):
            return offsets_to_json(available)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        min_rows = (limit.min_rows if isinstance(limit, ReadMinRows)
                    else self.o.min_offsets_per_trigger)
        new_rows = sum(available[k] - effective[k] for k in available)
        # AvailableNow ignores the minimum: its last batch may be small, and it must not wait.
        if min_rows and self._target is None:
            now = self._now_ms()
            if should_wait(new_rows, min_rows, now - self._last_batch_ms,
                           self.o.max_trigger_delay_ms):
                return start
        end = available if max_rows is None else split_limit(effective, available, max_rows)
        if new_rows:
            self._last_batch_ms = self._now_ms()
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        if begin == stop:
            return []
        store = self._open()
        try:
            bounds = self._bounds(store, [k for k in stop if store.queue_count(k[0]) > k[1]],
                                  {k: v for k, v in begin.items() if k in stop})
            # Check again here: the batch may be a replay after a restart, and retention may
            # have run since latestOffset planned it.
            effective, losses = reconcile({k: v for k, v in begin.items() if k in stop},
                                          bounds)
            handle_losses(losses, self.o.read.fail_on_data_loss)
            ranges = [QueueRange(t, q, effective[(t, q)], stop[(t, q)]) for t, q in sorted(stop)
                      if (t, q) in effective and stop[(t, q)] > effective[(t, q)]]
            tasks = plan_tasks(store, ranges, self.o.read.min_partitions, SHARED_TASK_ROWS)
        finally:
            store.close()
        return [RangesPartition(g) for g in tasks]

    def read(self, partition) -> Iterator:
        return read_ranges(self.o.read.path, partition, arrow_schema(self.schema),
                           self.o.read.max_records_per_batch, self.o.read.fail_on_data_loss,
                           verify_crc=self.o.read.verify_crc)

    def commit(self, end: dict) -> None:
        """Nothing to do: strata keeps no consumer state for Spark; the checkpoint is the truth."""
