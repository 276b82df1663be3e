"""The read schema of the strata source (Kafka-like) and its exact Arrow twin."""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

TIMESTAMP_TYPE_LOG_APPEND = 1  # Kafka's code for broker (log-append) time: strata's store time

CORE = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("queue_id", IntegerType()),
    StructField("queue_offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
METADATA = [
    StructField("tags", StringType()),
    StructField("keys", ArrayType(StringType())),
    StructField("msg_id", StringType()),
    StructField("commitlog_offset", LongType()),
    StructField("born_timestamp", TimestampType()),
]
HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))
HEADERS = [StructField("headers", HEADERS_TYPE)]

ALL_COLUMNS = {f.name for f in CORE + METADATA + HEADERS}


def read_schema(include_metadata: bool = False, include_headers: bool = False) -> StructType:
    fields = list(CORE)
    if include_metadata:
        fields += METADATA
    if include_headers:
        fields += HEADERS
    return StructType(fields)


def arrow_schema(schema: StructType):
    """The Arrow schema Spark demands for ``schema`` (binary/string, timestamp[us, UTC])."""
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(schema, timezone="UTC")
