"""``strata info``, ``scan`` and ``verify``: the commit log of a store, read-only."""

from __future__ import annotations

import json
import sys

import click
from rich.markup import escape
from rich.table import Table

from strata.cli.common import (_message_dict, _progress, console, err, human, open_readonly,
                               reader_gone)
from strata.errors import StrataError
from strata.log.verify import recovery_problems, verify_log
from strata.store.message_store import MessageStore


@click.command()
@click.argument("directory", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def info(directory: str, as_json: bool) -> None:
    """Segments, offsets and flush state of the commit log."""
    store = open_readonly(directory)
    with store:
        segs = store.log.segment_list()
        rows = [{"file": s.path.name, "base_offset": s.base_offset, "data_size": s.data_size,
                 "used": s.committed, "sealed": s.sealed,
                 "records": s.footer.record_count if s.footer else None}
                for s in segs]
        cp = store.checkpoint.load()
        running = store.follows_writer
        data = {"directory": str(store.path), "segments": rows,
                "min_offset": store.log.min_offset(), "confirmed_offset": store.confirmed_offset(),
                # README "Tiered storage": where the history retention deleted is read from
                "tier_url": store.config.tier_url,
                "first_offset": store.first_commitlog_offset(),
                "flushed_offset_checkpoint": cp.flushed_offset if cp else None,
                # while a writer runs its abort marker is there by design: no shutdown to judge
                "clean_shutdown": None if running else not store.abort_marker.exists(),
                "writer_running": running,
                "writer_pid": (store.state.read()[0] or None) if running else None,
                "topics": len(store.topics())}
    if as_json:
        click.echo(json.dumps(data, indent=1))
        return
    t = Table(title=f"commit log of {directory}")
    for c in ("file", "base offset", "used / size", "sealed", "records"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["file"], f"{r['base_offset']:,}", f"{human(r['used'])} / {human(r['data_size'])}",
                  "yes" if r["sealed"] else "no", "" if r["records"] is None else str(r["records"]))
    console.print(t)
    flushed = data["flushed_offset_checkpoint"]
    console.print(f"min offset {data['min_offset']:,}, confirmed offset "
                  f"{data['confirmed_offset']:,} ({human(data['confirmed_offset'])}), "
                  f"checkpoint flushed offset {'none' if flushed is None else f'{flushed:,}'}")
    if data["tier_url"]:
        console.print(f"tier {data['tier_url']}: history from commit-log offset "
                      f"{data['first_offset']}", soft_wrap=True)
    console.print(_writer_line(data))


def _writer_line(data: dict) -> str:
    """Who has the store open, or how its last writer left it."""
    if data["writer_running"]:
        pid = f" (pid {data['writer_pid']})" if data["writer_pid"] else ""
        return f"open for writing by a running process{pid}"
    if data["clean_shutdown"]:
        return "no writer running; last shutdown clean"
    return ("no writer running; last shutdown UNCLEAN (its writer stopped without closing the "
            "store; the next writer recovers it)")


@click.command()
@click.argument("directory", metavar="DIR")
@click.option("--from-offset", type=click.IntRange(0), default=0, show_default=True,
              help="Commit-log offset to start at.")
@click.option("--limit", type=click.IntRange(0), default=0,
              help="Stop after this many records (0 = all).")
@click.option("--topic", default=None, help="Only records of this topic.")
def scan(directory: str, from_offset: int, limit: int, topic: str | None) -> None:
    """Print records in log order, one JSON object per line.

    An offset inside a record starts at the next record and says so on stderr; on a terminal
    stderr shows the progress through the log."""
    store = open_readonly(directory)
    n = 0
    damaged: list[int] = []

    def on_damage(offset: int, error: str) -> None:   # never printed as a record: say so
        damaged.append(offset)
        err.print(f"Error: {error}", markup=False, highlight=False, soft_wrap=True)

    with store:
        end = store.confirmed_offset()
        start = _scan_start(store, from_offset, end)
        if start is None:
            return
        write = sys.stdout.write       # click.echo per line took a quarter of the time
        with _progress() as prog:
            task = prog.add_task("scanning", total=max(0, end - start))
            try:
                for i, m in enumerate(store.scan(start, to_offset=end, on_damage=on_damage)):
                    if i % 1024 == 1023:
                        prog.update(task, completed=m.commitlog_offset - start)
                    if topic is not None and m.topic != topic:
                        continue
                    write(json.dumps(_message_dict(m)) + "\n")
                    n += 1
                    if limit and n >= limit:
                        break
                sys.stdout.flush()
            except BrokenPipeError:       # the reader (`| head`) has gone: stop quietly
                reader_gone()
    if damaged:
        err.print(f"{len(damaged)} damaged record(s) passed over; `strata verify {directory}` "
                  "lists every damaged record", markup=False, highlight=False, soft_wrap=True)
        sys.exit(1)


def _scan_start(store: MessageStore, offset: int, end: int) -> int | None:
    """Where ``scan --from-offset offset`` starts: the offset itself if a record starts there,
    else the next record start (said on stderr); None (said) if no record lies at or after it."""
    low = store.first_commitlog_offset()   # the tier's oldest record, if it holds older
    if offset < low:
        if offset > 0:
            err.print(f"offset {offset} is below the log's first offset {low} (older segments "
                      f"were deleted); starting at {low}")
        return low
    if offset < store.log.min_offset():   # in the tier: scan starts at its next record
        return offset
    if offset >= end:
        err.print(f"offset {offset} is at or beyond the end of the log ({end}): no records")
        return None
    if store.log.check_at(offset, end) is not None:
        return offset
    seg = store.log.segments.find(offset)
    held = "not a record start"
    for s, pos, size in store.log.iter_records(seg.base_offset if seg else offset, end):
        at = s.base_offset + pos
        if at >= offset:
            err.print(f"offset {offset} is {held}; starting at the next record, {at}")
            return at
        if at + size > offset:
            held = f"inside the record at {at} ({size} bytes)"
    err.print(f"offset {offset} is not a record start and no whole record follows it before "
              f"the end of the log ({end}): no records")
    return None


@click.command()
@click.argument("directory", metavar="DIR")
def verify(directory: str) -> None:
    """Check every record's CRC and lengths, and that every consume-queue unit and key-index
    entry leads to its record; exit 1 and list file, offset and kind of each problem."""
    store = open_readonly(directory)
    with store:
        segs = list(store.log.segment_list())
        with _progress() as prog:
            task = prog.add_task("verifying", total=sum(s.committed for s in segs))
            found = verify_log(store.log.segments, store.confirmed_offset(),
                               progress=lambda done: prog.update(task, completed=done))
        if not store.follows_writer:   # what a writer's open would cut: a torn tail
            found.problems += recovery_problems(store.recovery_report, store.log.segments)
    derived, queues, index_files = _verify_derived(directory)
    for p in [*found.problems, *derived]:
        # one line per problem however narrow the output (a file, a pipe to grep), and a
        # detail's brackets printed, not read as markup
        line = escape(f"{p.file} offset {p.offset}: {p.kind}: {p.detail}")
        err.print(f"[red]CORRUPT[/red] {line}", soft_wrap=True, highlight=False)
    click.echo(json.dumps({"records": found.records, "segments": found.segments,
                           "problems": len(found.problems), "queues": queues,
                           "index_files": index_files, "index_problems": len(derived)}))
    if found.problems or derived:
        sys.exit(1)


def _verify_derived(directory: str) -> tuple[list, int, int]:
    """Consume queues and key index against the log, in this process (the checks of
    ``strata spark verify``, ``strata.index.verify``): (problems, queues, index files)."""
    from strata.index.verify import run_task
    from strata.spark.jobs.verify import VerifySummary, plan   # plain Python, no Spark
    try:
        p = plan(directory, VerifySummary(store=str(directory)))
    except StrataError as exc:
        raise click.ClickException(str(exc)) from None
    problems = []
    for task in p.tasks:
        problems += run_task(task, p.limits, records=False)[0]
    kinds = [t[0] for t in p.tasks]
    return problems, kinds.count("queue"), kinds.count("index")
