"""``strata spark``: the maintenance jobs on Apache Spark — verify, rebuild-index, export,
tier-verify.

Arguments are checked (store present, not locked, output path free) before a Spark session is
started, so a mistake costs no Spark start-up. PySpark is imported only inside the commands:
the rest of the CLI works without the ``spark`` extra.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from strata.files.layout import COMMITLOG_DIR
from strata.errors import StrataError
from strata.store.message_store import writer_alive

err = Console(stderr=True)

master_option = click.option("--master", default="local[*]", show_default=True,
                             help="Spark master URL (local[N], spark://host:port, ...).")


def spark_error_line(exc: BaseException) -> str | None:
    """A Spark failure (PySpark's own errors, or a Java exception through py4j) as one line:
    its error class or Java exception and the first line of its message, without the JVM's
    stack (None: not a Spark error)."""
    try:
        from pyspark.errors import PySparkException
        from py4j.protocol import Py4JJavaError
    except ImportError:
        return None
    if isinstance(exc, Py4JJavaError):
        java = exc.java_exception
        text = f"{java.getClass().getName()}: {java.getMessage()}"
    elif isinstance(exc, PySparkException):
        cls = exc.getCondition() if hasattr(exc, "getCondition") else exc.getErrorClass()
        text = str(exc) if not cls or cls in str(exc) else f"[{cls}] {exc}"
    else:
        return None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    hint = (" (Spark's Python workers lack strata: activate the venv, or set PYSPARK_PYTHON "
            "to its python)" if "DATA_SOURCE_NOT_FOUND" in first else "")
    return f"Spark job failed: {first[:500]}{hint}"


class _SparkGroup(click.Group):
    """Spark's errors reach the user as one line, not a Java-wrapped traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, StrataError):
            raise
        except Exception as exc:
            line = spark_error_line(exc)
            if line is None:
                raise
            raise click.ClickException(line) from None


@click.group("spark", cls=_SparkGroup)
def spark_group() -> None:
    """Maintenance jobs on Apache Spark (needs the spark extra and Java 17+). DIR is a store."""


def _require_store(directory: str) -> Path:
    path = Path(directory)
    if not (path / COMMITLOG_DIR).is_dir():
        why = "no such directory" if not path.exists() else f"no {COMMITLOG_DIR}/ inside"
        raise click.ClickException(f"no strata store at {directory} ({why})")
    return path


def _session(master: str):
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise click.ClickException("the Spark jobs need PySpark: pip install -e '.[spark]' in "
                                   "the strata checkout") from None
    from strata.spark import JavaNotFoundError
    from strata.spark.jobs.session import spark_session
    try:
        return spark_session(master, "strata-spark-job")
    except JavaNotFoundError as exc:
        raise click.ClickException(str(exc)) from None


def _progress(spark, title: str):
    from strata.spark.jobs.progress import SparkTaskProgress
    return SparkTaskProgress(spark, err, title)


def _report(result, as_json: bool, show: int) -> None:
    """Print a verify job's problems (at most ``show``; 0 = all) and its JSON summary; exit 1
    if it found any."""
    listed = result.problems if show <= 0 else result.problems[:show]
    for p in listed:
        if as_json:
            click.echo(json.dumps({"file": p.file, "offset": p.offset, "kind": p.kind,
                                   "detail": p.detail}))
        else:
            click.echo(f"PROBLEM {p.file} offset {p.offset} {p.kind}: {p.detail}")
    if len(listed) < len(result.problems):
        click.echo(f"... {len(result.problems) - len(listed)} more problems not listed "
                   "(--show 0 lists all)")
    click.echo(json.dumps(result.summary.to_dict()))
    if not result.ok:
        sys.exit(1)


@spark_group.command("verify")
@click.argument("directory", metavar="DIR")
@master_option
@click.option("--json", "as_json", is_flag=True, help="Print each problem as a JSON line.")
@click.option("--show", default=100, show_default=True,
              help="List at most this many problems (0 = all); the summary counts all.")
def verify_cmd(directory: str, master: str, as_json: bool, show: int) -> None:
    """Check every record (CRC, lengths at both ends, magic, footers), every consume-queue unit
    and every key-index entry, one Spark task per segment, queue and index file. Read-only: a
    running store can be verified (up to what its writer has confirmed). Exits 1 on any
    problem; the last line is a JSON summary."""
    from strata.spark.jobs.verify import verify

    path = _require_store(directory)
    spark = _session(master)
    try:
        with _progress(spark, "verify") as prog:
            result = verify(spark, path, progress=prog)
    except StrataError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    _report(result, as_json, show)


@spark_group.command("rebuild-index")
@click.argument("directory", metavar="DIR")
@master_option
@click.option("--no-crc", is_flag=True,
              help="Do not check records' CRC32C while extracting (lengths, magic and offsets "
                   "are still checked).")
@click.option("--queue-units", type=click.IntRange(min=1), default=None,
              help="Units per consume-queue file (default: as the existing files, else 300000).")
@click.option("--index-slots", type=click.IntRange(min=1), default=None,
              help="Key-index slots per file (default: as the existing files, else 5000000).")
@click.option("--index-entries", type=click.IntRange(min=2), default=None,
              help="Key-index entries per file (default: as the existing files, else 20000000).")
def rebuild_index_cmd(directory: str, master: str, no_crc: bool, queue_units: int | None,
                      index_slots: int | None, index_entries: int | None) -> None:
    """Rebuild consume queues and key index from the commit log, one Spark task per segment,
    into a new directory, then swap them in (crash-safe). The store must be stopped: the job
    holds its writer lock. Prints a JSON summary."""
    from strata.spark.jobs.rebuild_index import rebuild_index

    path = _require_store(directory)
    if writer_alive(path):
        raise click.ClickException(
            f"store {directory} is open for writing by another process; stop it first "
            "(rebuild-index needs the store's writer lock)")
    spark = _session(master)
    try:
        with _progress(spark, "rebuild-index") as prog:
            summary = rebuild_index(spark, path, verify_crc=not no_crc,
                                    units_per_file=queue_units, index_slots=index_slots,
                                    index_entries=index_entries, progress=prog)
    except StrataError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    click.echo(json.dumps(summary.to_dict()))


@spark_group.command("export")
@click.argument("directory", metavar="DIR")
@click.option("--topic", required=True, help="The topic to export.")
@click.option("--to", "to", required=True, help="Output directory (a table partitioned by date).")
@click.option("--format", "fmt", type=click.Choice(["parquet", "orc"]), default="parquet",
              show_default=True, help="File format of the exported table.")
@click.option("--overwrite", is_flag=True, help="Replace the output directory if it exists.")
@click.option("--include-metadata", is_flag=True,
              help="Add tags, keys, msg_id, commitlog_offset, born_timestamp.")
@click.option("--include-headers", is_flag=True, help="Add the user properties as headers.")
@master_option
def export_cmd(directory: str, topic: str, to: str, fmt: str, overwrite: bool,
               include_metadata: bool, include_headers: bool, master: str) -> None:
    """Write TOPIC as a Parquet (or ORC) table partitioned by the UTC date of each message's
    store time, with the strata read schema plus a ``date`` column. Prints a JSON summary."""
    from strata.spark.jobs.export import export_topic

    path = _require_store(directory)
    if Path(to).exists() and not overwrite:
        raise click.UsageError(f"{to} exists already; give a new path or --overwrite",
                               ctx=click.get_current_context())
    spark = _session(master)
    try:
        with _progress(spark, "export") as prog:
            summary = export_topic(spark, path, topic, to, format=fmt,
                                   mode="overwrite" if overwrite else "errorifexists",
                                   include_metadata=include_metadata,
                                   include_headers=include_headers, progress=prog)
    except StrataError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    click.echo(json.dumps(summary.to_dict()))


@spark_group.command("tier-verify")
@click.argument("directory", metavar="DIR", required=False)
@click.option("--tier-url", default=None,
              help="Verify this tier alone (file:///abs/dir or s3://bucket/prefix) from its "
                   "own metadata copy, instead of DIR's tier.")
@click.option("--endpoint-url", default=None, help="The S3-compatible endpoint of --tier-url.")
@master_option
@click.option("--json", "as_json", is_flag=True, help="Print each problem as a JSON line.")
@click.option("--show", default=100, show_default=True,
              help="List at most this many problems (0 = all); the summary counts all.")
def tier_verify_cmd(directory: str | None, tier_url: str | None, endpoint_url: str | None,
                    master: str, as_json: bool, show: int) -> None:
    """Check every record on a tier against the metadata, one Spark task per chunk: objects
    present and of the counted sizes, the .cq and .keys CRCs, each record's checks and CRC32C,
    topic, queue, offsets, store times. DIR is a store with a tier (its metadata is the truth);
    --tier-url reads a tier alone. Read-only. Exits 1 on any problem; the last line is a JSON
    summary."""
    from strata.spark.jobs.tier_verify import load_metadata, tier_verify

    if (directory is None) == (tier_url is None):
        raise click.UsageError("give a store directory DIR or --tier-url URL (one of them)",
                               ctx=click.get_current_context())
    if endpoint_url is not None and tier_url is None:
        raise click.UsageError("--endpoint-url goes with --tier-url (DIR's tier has its own)",
                               ctx=click.get_current_context())
    if directory is not None:
        _require_store(directory)
    try:   # a bad URL or a tier without metadata costs no Spark start-up
        load_metadata(directory, tier_url, endpoint_url)
    except StrataError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    spark = _session(master)
    try:
        with _progress(spark, "tier-verify") as prog:
            result = tier_verify(spark, directory, tier_url=tier_url, endpoint=endpoint_url,
                                 progress=prog)
    except StrataError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    _report(result, as_json, show)
