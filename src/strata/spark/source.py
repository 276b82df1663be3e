"""The strata Python data source: ``spark.read.format("strata")`` and ``df.write.format("strata")``.

Only small, picklable values live on these objects (options, strings, ints); stores are opened
inside the methods that use them: read-only on planners and executors, for writing only in the
driver-side write commit (see write.py).
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from strata.spark.options import (
    DEFAULT_VERIFY_CRC, OptionError, parse_read_options, parse_write_options)
from strata.spark.planning import QueueRange, plan_tasks, resolve_ranges
from strata.spark.pushdown import PushFiltersHook
from strata.spark.schema import ALL_COLUMNS, arrow_schema, read_schema

FORMAT_NAME = "strata"


class StrataDataSource(DataSource):
    """Reads topics of a strata store as Kafka-like rows; appends DataFrames to topics."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self):
        o = parse_read_options(self.options)
        return read_schema(o.include_metadata, o.include_headers)

    def reader(self, schema: StructType) -> "StrataBatchReader":
        o = parse_read_options(self.options)
        unknown = [f.name for f in schema.fields if f.name not in ALL_COLUMNS]
        if unknown:
            raise OptionError("schema", f"the strata source has no column {unknown[0]!r}; "
                                        f"columns: {', '.join(sorted(ALL_COLUMNS))}")
        return StrataBatchReader(o, schema)

    def writer(self, schema: StructType, overwrite: bool):
        from strata.spark.write import StrataWriter
        return StrataWriter(parse_write_options(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from strata.spark.stream_write import StrataStreamWriter
        return StrataStreamWriter(self.options, schema, overwrite)

    def streamReader(self, schema: StructType):
        from strata.spark.options import parse_stream_read_options
        from strata.spark.stream_read import StrataStreamReader
        return StrataStreamReader(parse_stream_read_options(self.options), schema)


# Without minPartitions, a batch read packs queue ranges into tasks of up to this many offsets
# (a range that is larger is a task of its own): each Python data source task costs tens of ms.
BATCH_TASK_ROWS = 1_000_000


class RangesPartition(InputPartition):
    """One Spark task: offsets [start, end) of one or more queues (``ranges``)."""

    def __init__(self, ranges) -> None:
        self.ranges = tuple(ranges)
        self.value = tuple((r.topic, r.queue_id, r.start, r.end) for r in self.ranges)


class StrataBatchReader(DataSourceReader):
    # Spark calls this only with spark.sql.python.filterPushdown.enabled=true (pushdown.py)
    pushFilters = PushFiltersHook()

    def __init__(self, options, schema: StructType) -> None:
        self.o = options
        self.schema = schema
        self.pushed = None  # pushdown.PushedFilters once Spark pushed filters

    def push_filters(self, filters: list) -> list:
        """Narrow the read by Spark's filters; return those Spark must still evaluate."""
        from strata.spark.pushdown import push_filters
        if not self.o.filter_pushdown:
            return filters
        self.pushed, rest = push_filters(filters)
        return rest

    def partitions(self) -> list[InputPartition]:
        from strata.spark.tier_read import History, pack_spans
        history = History.open(self.o)
        try:
            ranges = resolve_ranges(history, self.o, self.pushed)
            if history.meta is None:
                tasks = plan_tasks(history.store, ranges, self.o.min_partitions,
                                   BATCH_TASK_ROWS)
                return [RangesPartition(g) for g in tasks]
            spans, local = [], []
            for r in ranges:
                tier_part, local_part = history.split(r, self.o.fail_on_data_loss)
                spans += tier_part
                local.append(local_part)
            parts: list[InputPartition] = [
                TierPartition(history.tier_url, history.tier_endpoint, g)
                for g in pack_spans(spans, BATCH_TASK_ROWS, bool(self.o.min_partitions))]
            if history.store is not None:
                parts += [RangesPartition(g) for g in plan_tasks(
                    history.store, local, self.o.min_partitions, BATCH_TASK_ROWS)]
            return parts
        finally:
            history.close()

    def read(self, partition) -> Iterator:
        tag_hashes = self.pushed.tag_hashes if self.pushed else None
        if isinstance(partition, TierPartition):
            from strata.spark.tier_read import read_spans
            return read_spans(partition.url, partition.endpoint, partition.spans,
                              arrow_schema(self.schema), self.o.max_records_per_batch,
                              tag_hashes=tag_hashes)
        return read_ranges(self.o.path, partition, arrow_schema(self.schema),
                           self.o.max_records_per_batch, self.o.fail_on_data_loss,
                           tag_hashes=tag_hashes, verify_crc=self.o.verify_crc)


class TierPartition(InputPartition):
    """One Spark task: spans of tier chunks (tier_read.TierSpan)."""

    def __init__(self, url: str, endpoint: str | None, spans) -> None:
        self.url = url
        self.endpoint = endpoint
        self.spans = tuple(spans)
        self.value = (url, tuple((s.topic, s.queue_id, s.start, s.end) for s in self.spans))


def read_ranges(path: str, partition, schema, batch_rows: int, fail_on_data_loss: bool = True,
                *, tag_hashes=None, verify_crc: bool = DEFAULT_VERIFY_CRC) -> Iterator:
    """The record batches of a task: each of its queue ranges in turn, from one read-only
    opening of the store."""
    if not isinstance(partition, RangesPartition):  # Spark's stand-in for "no partitions"
        return iter(())
    return _ranges_batches(path, partition.ranges, schema, batch_rows, fail_on_data_loss,
                           tag_hashes, verify_crc)


def read_range(path: str, r: QueueRange, schema, batch_rows: int,
               fail_on_data_loss: bool = True, *, tag_hashes=None,
               verify_crc: bool = DEFAULT_VERIFY_CRC) -> Iterator:
    """Yield pyarrow RecordBatches of the messages at queue offsets [r.start, r.end); with
    ``tag_hashes``, only those whose consume-queue tag hash is one of them (the others'
    records are never read)."""
    return _ranges_batches(path, (r,), schema, batch_rows, fail_on_data_loss, tag_hashes,
                           verify_crc)


def _ranges_batches(path: str, ranges, schema, batch_rows: int, fail_on_data_loss: bool,
                    tag_hashes, verify_crc: bool) -> Iterator:
    """The ranges' record batches, from one read-only opening of the store, in commit-log
    order across the ranges (log_order.py); every record checked, its CRC32C too with
    ``verify_crc``."""
    import numpy as np

    from strata.spark.decode import Records, build_batch
    from strata.spark.geometry import open_readonly
    from strata.spark.log_order import log_ordered_units

    topics = sorted({r.topic for r in ranges})
    topic_of_range = np.array([topics.index(r.topic) for r in ranges], np.int32)
    queue_of_range = np.array([r.queue_id for r in ranges], np.int32)
    store = open_readonly(path)
    try:
        segments = store.log.segment_list()
        for phys, which in log_ordered_units(store, ranges, batch_rows, fail_on_data_loss,
                                             tag_hashes):
            yield build_batch(Records(segments, phys, verify_crc=verify_crc), topics,
                              topic_of_range[which] if len(topics) > 1 else None,
                              queue_of_range[which], schema)
    finally:
        store.close()
