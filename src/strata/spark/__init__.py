"""strata on Apache Spark: the ``strata`` Python data source (batch read, batch write).

    spark.read.format("strata").option("path", DIR).option("subscribe", "orders").load()
    df.write.format("strata").mode("append").option("path", DIR).option("topic", "t").save()

Installing strata with the ``spark`` extra also installs the top-level module ``pyspark_strata``,
which PySpark (4.x) finds on its own, so ``format("strata")`` works without ``register``.
``register(spark)`` registers the source explicitly (for sessions whose Python workers cannot
import ``pyspark_strata``'s auto-discovery, or to be explicit).
"""

from __future__ import annotations

import os
import shutil

from strata.errors import StrataError


class JavaNotFoundError(StrataError, RuntimeError):
    """Spark needs a Java runtime (17 or later) and none was found."""


def check_java() -> str:
    """Path of the ``java`` Spark will use; JavaNotFoundError with what to do if there is none."""
    home = os.environ.get("JAVA_HOME")
    if home:
        exe = os.path.join(home, "bin", "java")
        if os.access(exe, os.X_OK):
            return exe
        raise JavaNotFoundError(f"JAVA_HOME={home} has no bin/java; point JAVA_HOME at a Java 17+ "
                                "installation (or unset it to use java on PATH)")
    exe = shutil.which("java")
    if exe is None:
        raise JavaNotFoundError("PySpark needs Java 17 or later and no 'java' is on PATH and "
                                "JAVA_HOME is not set: install a JDK/JRE 17+ (e.g. "
                                "'apt-get install openjdk-17-jre-headless') or set JAVA_HOME")
    return exe


def register(spark) -> None:
    """Register the ``strata`` data source with ``spark`` (a SparkSession)."""
    from strata.spark.source import StrataDataSource
    spark.dataSource.register(StrataDataSource)


def __getattr__(name: str):
    if name == "StrataDataSource":
        from strata.spark.source import StrataDataSource
        return StrataDataSource
    raise AttributeError(name)


__all__ = ["register", "check_java", "JavaNotFoundError", "StrataDataSource"]
