"""A SparkSession for strata's command-line jobs and the demo (tests and notebooks bring their own)."""

from __future__ import annotations

import os
import sys


def spark_session(master: str = "local[*]", app_name: str = "strata", *,
                  console_progress: bool = False):
    """Start (or reuse) a session on ``master`` set up for strata: Python workers run this
    interpreter (which has strata), no web UI, UTC session time, quiet logs.

    Raises ``strata.spark.JavaNotFoundError`` (saying what to install) when there is no Java,
    before PySpark would fail with a py4j stack trace.
    """
    from strata.spark import check_java
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "true" if console_progress else "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark
