"""One local[2] SparkSession for the whole Spark suite, and small strata stores to read."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import strata


def small_store_config() -> strata.StoreConfig:
    """64 KiB segments and small queue/index files: several segments from few messages."""
    return strata.StoreConfig(segment_size=64 * 1024, prefault=False, consume_queue_units=1024,
                              index_slots=1024, index_entries=8192)


def body_for(seq: int, size: int) -> bytes:
    return (seq.to_bytes(8, "little") * (size // 8 + 1))[:size]


@pytest.fixture(scope="session")
def spark():
    from strata.spark import check_java
    check_java()  # a clear error instead of a py4j stack trace when Java is missing
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("strata-tests")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.sql.session.timeZone", "UTC")
         .getOrCreate())
    yield s
    s.stop()


TOPICS = {"orders": 3, "audit": 2, "empty": 2}


def fill_store(path: Path, per_topic: dict[str, int]) -> None:
    """Messages with keys, tags and properties; every third without a key, some without tag."""
    with strata.open(path, small_store_config()) as store:
        for t, q in TOPICS.items():
            store.create_topic(t, queues=q)
        seq = 0
        for t, n in per_topic.items():
            msgs = []
            for i in range(n):
                kw = {}
                if i % 3:
                    kw["keys"] = (f"k{seq}", f"second-{seq}")
                else:
                    kw["keys"] = ()
                if i % 2:
                    kw["tags"] = f"tag{i % 4}"
                if i % 5 == 0:
                    kw["properties"] = {"region": "eu", "n": str(i)}
                msgs.append(strata.Message(t, body_for(seq, 50 + i % 90), **kw))
                seq += 1
            store.put_batch(msgs)
        store.wait_dispatched()


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory) -> Path:
    """A store read by many tests (never written to): 3000 orders over several 64 KiB segments,
    700 audit, an empty topic."""
    path = tmp_path_factory.mktemp("spark-read") / "store"
    fill_store(path, {"orders": 3000, "audit": 700})
    return path
