"""The read schema of the strata source (Kafka-like) and its exact Arrow twin."""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

TIMESTAMP_TYPE_LOG_APPEND = 1  # Kafka's code for broker (log-append) time: strata's store time

# Only ``key`` (a message without keys) and ``tags`` (a message without tags) can be null;
# every other column always has a value, and says so. Spark then skips a null check per row
# and column (each a bounds-checked read of an Arrow validity buffer) when it turns the
# source's Arrow batches into rows: those checks were about a fifth of the JVM's samples in a
# profile of a plain read, and are about 1% now (bench/README.md). Kafka's source declares
# every column nullable.
CORE = [
    StructField("key", BinaryType(), nullable=True),
    StructField("value", BinaryType(), nullable=False),
    StructField("topic", StringType(), nullable=False),
    StructField("queue_id", IntegerType(), nullable=False),
    StructField("queue_offset", LongType(), nullable=False),
    StructField("timestamp", TimestampType(), nullable=False),
    StructField("timestampType", IntegerType(), nullable=False),
]
METADATA = [
    StructField("tags", StringType(), nullable=True),
    StructField("keys", ArrayType(StringType(), containsNull=False), nullable=False),
    StructField("msg_id", StringType(), nullable=False),
    StructField("commitlog_offset", LongType(), nullable=False),
    StructField("born_timestamp", TimestampType(), nullable=False),
]
HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType(), nullable=False),
                                     StructField("value", BinaryType(), nullable=False)]),
                         containsNull=False)
HEADERS = [StructField("headers", HEADERS_TYPE, nullable=False)]

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
