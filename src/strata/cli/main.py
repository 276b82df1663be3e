"""The ``strata`` command: inspect, verify and use a store from the shell.

The commands live by concern in ``strata.cli``: ``log_cmd`` (info, scan, verify),
``queues_cmd`` (topics, stat), ``messages_cmd`` (get, query, put) and the ``*_cmd`` modules
of the groups; what they share is in ``common``. This module makes the group and adds them."""

from __future__ import annotations

import errno
import sys

import click

from strata.cli.common import (_message_dict, _progress, console, err, human, open_readonly,
                               reader_gone)
from strata.cli.console_cmd import console_command
from strata.cli.groups_cmd import groups_command
from strata.cli.log_cmd import info, scan, verify
from strata.cli.messages_cmd import get, put, query
from strata.cli.queues_cmd import stat, topics
from strata.cli.refstore_cmd import refstore_group
from strata.cli.serve import serve_command
from strata.cli.spark_cmd import spark_group
from strata.cli.tier_cmd import tier_group
from strata.cli.warm_cmd import warm_command
from strata.errors import StrataError, StoreNotFoundError

# imported from here by other modules and tests (their home is strata.cli.common)
__all__ = ["cli", "main", "open_readonly", "_progress", "_message_dict", "human"]


def _version() -> str:
    """The installed distribution's version ("strata-mq"; "strata" in installs made before
    the rename), or "unknown" when run from a source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version
    for name in ("strata-mq", "strata"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "unknown"


class StrataGroup(click.Group):
    """Turns strata's own errors, and the operating system's (a full disk, a permission, a
    missing file), into one-line messages and exit code 1: never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            reader_gone()
        except StrataError as exc:
            raise click.ClickException(_strata_error_line(exc)) from None
        except OSError as exc:
            raise click.ClickException(_os_error_line(exc)) from None
        except UnicodeEncodeError as exc:   # shell bytes that are not UTF-8, as surrogates
            raise click.ClickException(
                f"an argument is not valid UTF-8 ({exc.reason} at character {exc.start} of "
                f"{exc.object[:40]!r}); strata takes text arguments as UTF-8") from None


def _strata_error_line(exc: StrataError) -> str:
    """``DiskFullError: no space left to ...`` without the ``[Errno 28]`` an OSError subclass
    puts in front of its text, and with what to do about a full disk."""
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            text += (" (free space on that file system, or make room in the store: "
                     "`strata topics delete DIR NAME --yes`, or retention; then retry)")
    else:
        text = str(exc)
    return f"{type(exc).__name__}: {text}"


def _os_error_line(exc: OSError) -> str:
    """``OSError [Errno 28] No space left on device: 'DIR/lock'`` as one readable line."""
    what = exc.strerror or str(exc)
    where = f": {exc.filename}" if exc.filename else ""
    hint = " (free space on that file system, then retry)" if exc.errno in (
        errno.ENOSPC, errno.EDQUOT) else ""
    return f"{type(exc).__name__}: {what}{where}{hint}"


@click.group(cls=StrataGroup)
@click.version_option(version=_version(), prog_name="strata")
def cli() -> None:
    """strata: a durable message store. DIR is a store directory."""


@click.command()
@click.argument("directory", metavar="DIR", default="./data")
@click.option("--messages", type=click.IntRange(min=1), default=200_000, show_default=True,
              help="Rich messages to append (and as many plain ones after them).")
@click.option("--batch", type=click.IntRange(min=1), default=512, show_default=True,
              help="Messages per put_batch call.")
@click.option("--spark/--no-spark", default=True, show_default=True,
              help="End with the Spark step (counts through spark.read.format('strata'), "
                   "Parquet export to DIR-parquet/).")
def demo(directory: str, messages: int, batch: int, spark: bool) -> None:
    """The main job: append a sample workload to DIR, read it back, verify, summarise."""
    from strata.cli.demo import run_demo
    ok = run_demo(directory, messages, batch, console, spark=spark)
    if not ok:
        sys.exit(1)


for _command in (info, scan, verify, topics, get, query, stat, put, demo):
    cli.add_command(_command)
cli.add_command(refstore_group, "refstore")
cli.add_command(spark_group, "spark")
cli.add_command(tier_group, "tier")
cli.add_command(serve_command, "serve")
cli.add_command(console_command, "console")
cli.add_command(groups_command, "groups")
cli.add_command(warm_command, "warm")


def main() -> None:
    try:
        cli(standalone_mode=True)
    except StoreNotFoundError as exc:
        err.print(f"error: {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
