"""PySpark discovers Python data sources in top-level modules named ``pyspark_*`` that expose
``DefaultSource``; this one makes ``spark.read.format("strata")`` work with no registration."""

from strata.spark.source import StrataDataSource as DefaultSource

__all__ = ["DefaultSource"]
