"""strata's maintenance jobs on Apache Spark: ``verify``, ``rebuild_index``, ``export_topic``.

Each takes an existing SparkSession first (``spark_session()`` builds one for scripts) and the
store directory; ``strata spark verify|rebuild-index|export`` runs them from the shell.
"""

from strata.spark.jobs.export import ExportSummary, export_topic
from strata.spark.jobs.rebuild_index import RebuildSummary, rebuild_index
from strata.spark.jobs.session import spark_session
from strata.spark.jobs.verify import VerifyResult, VerifySummary, verify

__all__ = ["verify", "VerifyResult", "VerifySummary", "rebuild_index", "RebuildSummary",
           "export_topic", "ExportSummary", "spark_session"]
