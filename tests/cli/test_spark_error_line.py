"""Spark's errors reach a `strata spark` user as one line (issue 26.7), not a Java-wrapped
traceback; other errors are left alone."""

from pyspark.errors import AnalysisException, PySparkValueError

from strata.cli.spark_cmd import spark_error_line


def test_a_spark_error_is_one_line_with_its_class():
    e = AnalysisException("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: strata.\n"
                          "JVM stacktrace:\norg.apache.spark.SparkClassNotFoundException\n\tat x")
    line = spark_error_line(e)
    assert "\n" not in line and "JVM" not in line
    assert line.startswith("Spark job failed: [DATA_SOURCE_NOT_FOUND] Failed to find")
    assert "PYSPARK_PYTHON" in line
    e = PySparkValueError(errorClass="CANNOT_BE_EMPTY", messageParameters={"item": "path"})
    assert spark_error_line(e) == ("Spark job failed: [CANNOT_BE_EMPTY] At least one path "
                                   "must be specified.")


def test_other_errors_are_not_spark_errors():
    assert spark_error_line(ValueError("x")) is None
