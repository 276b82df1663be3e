"""One local[2] SparkSession for the whole Spark suite, and a small strata store to read
(helpers in spark_support.py, importable by that unique name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_support import fill_store


@pytest.fixture(scope="session")
def spark():
    from strata.spark.jobs import spark_session  # checks Java first: a clear error without it
    s = spark_session("local[2]", "strata-tests")
    s.conf.set("spark.sql.shuffle.partitions", "2")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory) -> Path:
    """A store read by many tests (never written to): 3000 orders over several 64 KiB segments,
    700 audit, an empty topic."""
    path = tmp_path_factory.mktemp("spark-read") / "store"
    fill_store(path, {"orders": 3000, "audit": 700})
    return path
