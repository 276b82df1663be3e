"""One local[2] SparkSession for the whole Spark suite, and a small strata store to read
(helpers in spark_support.py, importable by that unique name)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from spark_support import fill_store


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


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory) -> Path:
    """A store read by many tests (never written to): 3000 orders over several 64 KiB segments,
    700 audit, an empty topic."""
    path = tmp_path_factory.mktemp("spark-read") / "store"
    fill_store(path, {"orders": 3000, "audit": 700})
    return path
