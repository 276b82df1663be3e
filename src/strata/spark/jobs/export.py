"""``export``: one topic as a Parquet (or ORC) table partitioned by the date of its store time.

It reads through the data source (``spark.read.format("strata")``), so the table has the
source's read schema — ``key, value, topic, queue_id, queue_offset, timestamp, timestampType``
(plus the metadata / headers columns on request) — and one more column, ``date``: the UTC
calendar date of ``timestamp``, computed arithmetically so the session's time zone does not
matter. Reading the table back gives the topic's messages.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from strata.errors import InvalidInputError
from strata.spark.jobs.progress import NullProgress

FORMATS = ("parquet", "orc")
MODES = ("errorifexists", "overwrite")
PARTITION_COLUMN = "date"


@dataclass
class ExportSummary:
    store: str
    topic: str
    to: str
    format: str
    rows: int = 0
    dates: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def export_topic(spark, path: str | Path, topic: str, to: str | Path, *,
                 format: str = "parquet", mode: str = "errorifexists",  # noqa: A002
                 include_metadata: bool = False, include_headers: bool = False,
                 progress=None) -> ExportSummary:
    """Write every message of ``topic`` to ``to`` as a ``format`` table partitioned by date.

    ``mode`` is ``errorifexists`` (default: refuse an existing ``to``) or ``overwrite``.
    Raises ``StoreNotFoundError`` without a store and ``InvalidInputError`` for an unknown
    topic, format or mode, before any Spark job runs.
    """
    from pyspark.sql import functions as F

    from strata.spark.geometry import open_readonly

    progress = progress or NullProgress()
    t0 = time.perf_counter()
    if format not in FORMATS:
        raise InvalidInputError(f"export format must be one of {', '.join(FORMATS)}, "
                                f"got {format!r}")
    if mode not in MODES:
        raise InvalidInputError(f"export mode must be one of {', '.join(MODES)}, got {mode!r}")
    to = str(to)
    if mode == "errorifexists" and Path(to).exists():
        raise InvalidInputError(f"{to} exists already; choose a new path or overwrite it")
    progress.phase("planning")
    store = open_readonly(path)
    try:
        topics = store.topics()
    finally:
        store.close()
    if topic not in topics:
        raise InvalidInputError(f"no topic {topic!r} in the store at {path} "
                                f"(topics: {', '.join(topics) or 'none'})")
    df = (spark.read.format("strata").option("path", str(path)).option("subscribe", topic)
          .option("includeMetadata", str(include_metadata).lower())
          .option("includeHeaders", str(include_headers).lower()).load())
    day_us = 86_400_000_000
    df = df.withColumn(PARTITION_COLUMN, F.date_from_unix_date(
        F.floor(F.unix_micros("timestamp") / F.lit(day_us)).cast("int")))
    progress.phase(f"writing {topic} to {to}")
    df.write.mode(mode).partitionBy(PARTITION_COLUMN).format(format).save(to)
    progress.phase("counting")
    written = spark.read.format(format).load(to)
    summary = ExportSummary(store=str(path), topic=topic, to=to, format=format)
    summary.rows = written.count()
    summary.dates = sum(1 for p in Path(to).iterdir() if p.name.startswith(PARTITION_COLUMN + "="))
    summary.seconds = round(time.perf_counter() - t0, 3)
    return summary
