"""The ``strata`` command: inspect, verify and use a store from the shell."""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn,
                           TimeRemainingColumn, TransferSpeedColumn)
from rich.table import Table

import strata
from strata.files.layout import COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR
from strata.cli.admin_cmd import acl_options, through_broker
from strata.cli.console_cmd import console_command
from strata.cli.groups_cmd import groups_command
from strata.cli.refstore_cmd import refstore_group
from strata.cli.serve import serve_command
from strata.cli.spark_cmd import spark_group
from strata.cli.tier_cmd import tier_group
from strata.errors import StrataError, StoreNotFoundError
from strata.log.verify import recovery_problems, verify_log
from strata.store.config import StoreConfig
from strata.store.geometry import stored_geometry
from strata.format.record import encode_topic
from strata.store.message import Message
from strata.store.message_store import MessageStore, check_messages
from strata.store.topics import TopicTable, TopicType, check_new_topic
from strata.words import count

console = Console(stderr=False)
err = Console(stderr=True)


def _progress(transient: bool = True) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(), console=err,
                    transient=transient, disable=not err.is_terminal)


def open_readonly(directory: str) -> MessageStore:
    """Open a store read-only for inspection; a clear error if there is none."""
    path = Path(directory)
    if not path.is_dir():
        raise click.ClickException(f"no such directory: {directory}")
    if not (path / COMMITLOG_DIR).is_dir():
        raise click.ClickException(f"{directory} is not a strata store (no {COMMITLOG_DIR}/ inside)")
    try:
        return strata.open(path, readonly=True)
    except StrataError as exc:
        raise click.ClickException(str(exc)) from None


def _message_dict(m) -> dict:
    """A message as JSON: the body as text if it is UTF-8, else as hex, marked so by
    ``"body_encoding": "hex"`` (a hex string is also valid text: unmarked, it would lie)."""
    body = m.body
    try:
        shown, encoding = body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        shown, encoding = body.hex(), "hex"
    return {"msg_id": m.msg_id, "topic": m.topic, "queue_id": m.queue_id,
            "queue_offset": m.queue_offset, "commitlog_offset": m.commitlog_offset,
            "store_timestamp": m.store_timestamp, "born_timestamp": m.born_timestamp,
            "keys": list(m.keys), "tags": m.tags, "properties": m.properties,
            "size": m.size, "body": shown, "body_encoding": encoding}


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
        except StrataError as exc:
            raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
        except OSError as exc:
            raise click.ClickException(_os_error_line(exc)) from None
        except UnicodeEncodeError as exc:   # shell bytes that are not UTF-8, as surrogates
            raise click.ClickException(
                f"an argument is not valid UTF-8 ({exc.reason} at character {exc.start} of "
                f"{exc.object[:40]!r}); strata takes text arguments as UTF-8") from None


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


# ---------------------------------------------------------------------- commit log


@cli.command()
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


@cli.command()
@click.argument("directory", metavar="DIR")
@click.option("--from-offset", default=0, show_default=True, help="Commit-log offset to start at.")
@click.option("--limit", default=0, help="Stop after this many records (0 = all).")
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
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
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


@cli.command()
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
        err.print(f"[red]CORRUPT[/red] {p.file} offset {p.offset}: {p.kind}: {p.detail}")
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


# ---------------------------------------------------------------------- topics and queues


class _TopicsGroup(click.Group):
    """``strata topics DIR`` (no subcommand) still lists, as before ``create`` existed."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@cli.group(cls=_TopicsGroup)
def topics() -> None:
    """List topics (strata topics [list] DIR) or create one (strata topics create)."""


@topics.command("list")
@click.argument("directory", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def topics_list(directory: str, as_json: bool) -> None:
    """List topics with their queue counts, message types, message counts and queue offsets
    (summed over the queues: the web console's topics columns)."""
    store = open_readonly(directory)
    with store:
        rows = []
        for name in store.topics():
            n = store.queue_count(name)
            lo = [store.min_offset(name, q) for q in range(n)]
            hi = [store.max_offset(name, q) for q in range(n)]
            rows.append({"topic": name, "queues": n, "type": store.topic_type(name).value,
                         "messages": sum(hi) - sum(lo), "min_offset": sum(lo),
                         "max_offset": sum(hi)})
    if as_json:
        click.echo(json.dumps({"topics": rows}, indent=1))
        return
    t = Table(title="topics")
    for c in ("topic", "queues", "type", "messages", "min offsets", "max offsets"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["topic"], str(r["queues"]), r["type"], str(r["messages"]),
                  str(r["min_offset"]), str(r["max_offset"]))
    console.print(t)


@topics.command("create")
@click.argument("directory", metavar="DIR")
@click.argument("name")
@click.option("--queues", type=int, default=None,
              help="Number of queues (default: the store's default_queues, 8).")
@click.option("--type", "message_type", default="normal", show_default=True,
              type=click.Choice([t.value for t in TopicType], case_sensitive=False),
              help="The one message type the topic accepts: `strata serve` refuses a send of "
                   "another type, and its routes list only this one.")
@acl_options
def topics_create(directory: str, name: str, queues: int | None, message_type: str,
                  access_key: str | None, secret_key: str | None) -> None:
    """Create topic NAME in the store at DIR (made if missing). A topic that exists with the
    same queue count and type is left as it is; with another count or type it is an error.
    On a store `strata serve` holds, the running broker does it (its admin API)."""
    # refused input never opens (or creates) the store: the name, count and type come first
    kind = check_new_topic(name, 1 if queues is None else queues, message_type)
    got = through_broker(directory, "/topics/create", {"topic": name, "queues": queues,
                                                       "type": message_type},
                         access_key, secret_key)
    if got is not None:
        click.echo(f"{'created' if got['created'] else 'exists:'} topic {name} "
                   f"({count(got['queues'], 'queue')}, {got['type']} messages; through the "
                   "running broker)")
        return
    if (Path(directory) / COMMITLOG_DIR).is_dir():   # an existing topic of another count/type
        table = TopicTable(Path(directory), readonly=True)
        try:
            table.load()
        except StrataError:
            pass                  # a damaged table: the writer's open repairs it, then checks
        else:
            table.check_same(name, queues, kind)
    with strata.open(directory) as store:
        if store.recovery_report is not None and store.recovery_report.new_store:
            err.print(f"created a new store at {directory} (no store was there)",
                      markup=False, highlight=False, soft_wrap=True)
        created = store.create_topic(name, queues, message_type=message_type)
        n, kind = store.queue_count(name), store.topic_type(name).value
    click.echo(f"{'created' if created else 'exists:'} topic {name} ({count(n, 'queue')}, "
               f"{kind} messages)")


@topics.command("add-queues")
@click.argument("directory", metavar="DIR")
@click.argument("name")
@click.option("--queues", type=click.IntRange(1, 1 << 16), required=True,
              help="The topic's new queue count (queues are only ever added).")
@acl_options
def topics_add_queues(directory: str, name: str, queues: int, access_key: str | None,
                      secret_key: str | None) -> None:
    """Give topic NAME in the store at DIR more queues (through the running broker when
    `strata serve` holds the store)."""
    encode_topic(name)
    got = through_broker(directory, "/topics/queues", {"topic": name, "queues": queues},
                         access_key, secret_key)
    if got is None:
        with _open_writer(directory) as store:
            _require_queue(store, directory, name)
            store.set_queue_count(name, queues)
            got = {"queues": store.queue_count(name)}
    click.echo(f"topic {name} has {count(got['queues'], 'queue')}")


@topics.command("delete")
@click.argument("directory", metavar="DIR")
@click.argument("name")
@click.option("--yes", is_flag=True, required=True,
              help="Confirm: the topic's queues go at once (its records age out with the log).")
@acl_options
def topics_delete(directory: str, name: str, yes: bool, access_key: str | None,
                  secret_key: str | None) -> None:
    """Delete topic NAME from the store at DIR (through the running broker when `strata
    serve` holds the store)."""
    encode_topic(name)
    got = through_broker(directory, "/topics/delete", {"topic": name}, access_key, secret_key)
    if got is None:
        with _open_writer(directory) as store:
            got = {"deleted": store.delete_topic(name)}
    click.echo(f"deleted topic {name}" if got["deleted"] else f"no topic {name} in {directory}")


def _open_writer(directory: str) -> MessageStore:
    """The existing store at DIR opened as its writer (never created by an admin command)."""
    if not (Path(directory) / COMMITLOG_DIR).is_dir():
        raise click.ClickException(f"{directory} is not a strata store (no {COMMITLOG_DIR}/ "
                                   "inside)")
    return MessageStore(directory, create=False)


def _require_queue(store: MessageStore, directory: str, topic: str,
                   queue: int | None = None) -> None:
    """A clear error (exit 1) for a topic the store does not have, or a queue it lacks."""
    n = store.queue_count(topic)
    if n == 0:
        have = ", ".join(store.topics()[:10]) or "none"
        raise click.ClickException(f"no topic {topic!r} in {directory} (its topics: {have})")
    if queue is not None and not 0 <= queue < n:
        raise click.ClickException(f"topic {topic!r} has {n} queue(s), 0..{n - 1}; "
                                   f"there is no queue {queue}")


@cli.command()
@click.argument("directory", metavar="DIR")
@click.argument("topic")
@click.argument("queue", type=int)
@click.argument("offset", type=int)
@click.option("-n", "--max-messages", default=32, show_default=True,
              help="Read at most this many messages.")
@click.option("--tags", default=None, help='Tag filter, e.g. "a||b".')
def get(directory: str, topic: str, queue: int, offset: int, max_messages: int,
        tags: str | None) -> None:
    """Read messages of one queue from OFFSET (JSON lines; status on stderr)."""
    store = open_readonly(directory)
    with store:
        _require_queue(store, directory, topic, queue)
        r = store.get(topic, queue, offset, max_messages, tags=tags)
        for m in r.messages:
            click.echo(json.dumps(_message_dict(m)))
        err.print(f"status {r.status.name}, next offset {r.next_offset}, "
                  f"min {r.min_offset}, max {r.max_offset}")
        if r.corrupt:   # passed over, never printed: say so and fail
            raise click.ClickException("\n".join(
                f"CorruptRecordError: {topic}/{queue} offset {c.queue_offset}: {c.error()}"
                for c in r.corrupt))


@cli.command()
@click.argument("directory", metavar="DIR")
@click.argument("topic")
@click.argument("key")
@click.option("--begin-ms", default=0, show_default=True,
              help="Only messages stored at or after this time (ms since the epoch).")
@click.option("--end-ms", default=None, type=int,
              help="Only messages stored at or before this time (ms; default: now).")
@click.option("-n", "--max-results", default=64, show_default=True,
              help="Return at most this many messages.")
def query(directory: str, topic: str, key: str, begin_ms: int, end_ms: int | None,
          max_results: int) -> None:
    """Messages of TOPIC with KEY, newest first (JSON lines)."""
    store = open_readonly(directory)
    with store:
        _require_queue(store, directory, topic)
        found = store.query(topic, key, begin_ms=begin_ms, end_ms=end_ms, max_results=max_results)
        for m in found:
            click.echo(json.dumps(_message_dict(m)))
        err.print(f"{len(found)} message(s)")


def _dir_bytes(path: Path) -> tuple[int, int]:
    """(bytes on disk, apparent size) of the files under ``path``. Segment, queue and index
    files are sparse: made at full size, their blocks allocated as they fill, so the disk
    use is the allocated blocks (what ``du`` shows), not the sizes ``ls -l`` shows."""
    disk = apparent = 0
    if path.is_dir():
        for p in path.rglob("*"):
            st = p.lstat()
            if p.is_file():
                disk += st.st_blocks * 512
                apparent += st.st_size
    return disk, apparent


def human(n: int) -> str:
    """``n`` bytes in binary units: 512 B, 1.5 KiB, 515.0 MiB, 1.00 GiB."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.2f} {unit}" if n < 10 else f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


@cli.command()
@click.argument("directory", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def stat(directory: str, as_json: bool) -> None:
    """Per-queue min/max offsets, dispatch lag and disk use."""
    store = open_readonly(directory)
    with store:
        queues = []
        for name in store.topics():
            for q in range(store.queue_count(name)):
                queues.append({"topic": name, "queue": q, "min": store.min_offset(name, q),
                               "max": store.max_offset(name, q),
                               "earliest_ms": store.earliest_time(name, q)})
        sizes = {d: _dir_bytes(store.path / d) for d in (COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR)}
        data = {"queues": queues, "dispatch_lag_bytes": store.dispatch_behind_bytes(),
                # allocated blocks (du); apparent: the files' sizes (ls -l), sparse ahead
                "disk_bytes": {d: s[0] for d, s in sizes.items()},
                "apparent_bytes": {d: s[1] for d, s in sizes.items()},
                "commitlog": {"min": store.log.min_offset(), "confirmed": store.confirmed_offset()}}
    if as_json:
        click.echo(json.dumps(data, indent=1))
        return
    t = Table(title=f"queues of {directory}")
    for c in ("topic", "queue", "min offset", "max offset", "messages"):
        t.add_column(c)
    for r in queues:
        t.add_row(r["topic"], str(r["queue"]), str(r["min"]), str(r["max"]), str(r["max"] - r["min"]))
    console.print(t)
    console.print(f"dispatch lag {human(data['dispatch_lag_bytes'])}; disk used: " + ", ".join(
        f"{k} {human(v)} (files {human(data['apparent_bytes'][k])})"
        for k, v in data["disk_bytes"].items()))
    console.print("Files are sparse: made at full size, they take disk as they fill. Disk "
                  "use runs ahead of the data by what a writer reserves (posix_fallocate) "
                  "ahead of itself: in its segment about a quarter second of its writes (1 MiB to "
                  "256 MiB, by its rate), or a sixteenth of its data when it outran that, "
                  "and the key index's next file (index/next.spare), so a full disk refuses a "
                  "put before it is acknowledged.", style="dim", markup=False)


def _utf8(value: str | None, hint: str) -> bytes | None:
    """``value`` as UTF-8; a clear error naming the option when the shell passed bytes that
    are not UTF-8 (Python hands them over as lone surrogates, which cannot be encoded)."""
    if value is None:
        return None
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start].encode("utf-8", "surrogateescape")
        raise click.BadParameter(
            f"is not valid UTF-8 (byte 0x{bad.hex()} at character {exc.start}); strata "
            "stores text options as UTF-8 (a binary body can come on stdin)",
            param_hint=hint) from None


@cli.command()
@click.argument("directory", metavar="DIR")
@click.argument("topic")
@click.option("--body", default=None, help="Message body (default: read stdin).")
@click.option("--key", "keys", multiple=True, help="A message key (repeatable).")
@click.option("--tags", default=None, help="The message's tag (consumers filter on it).")
@click.option("--property", "props", multiple=True, help="NAME=VALUE (repeatable).")
@click.option("--queue", "queue_id", type=int, default=None,
              help="Put into this queue (default: round-robin over the topic's queues).")
@click.option("--sync", is_flag=True, help="Open with flush=sync (fsync before returning).")
def put(directory: str, topic: str, body: str | None, keys: tuple[str, ...], tags: str | None,
        props: tuple[str, ...], queue_id: int | None, sync: bool) -> None:
    """Append one message (body from --body or stdin); prints its PutResult as JSON."""
    data = _utf8(body, "--body") if body is not None else sys.stdin.buffer.read()
    _utf8(topic, "TOPIC")
    for value, hint in [*((k, "--key") for k in keys), (tags, "--tags"),
                        *((p, "--property") for p in props)]:
        _utf8(value, hint)
    properties = {}
    for p in props:
        if "=" not in p:
            raise click.BadParameter(f"{p!r} is not NAME=VALUE", param_hint="--property")
        k, v = p.split("=", 1)
        properties[k] = v
    # the store's own geometry (an explicit default config would replace it for new files)
    cfg = StoreConfig(flush="sync", **stored_geometry(directory)) if sync else None
    msg = Message(topic, data, keys=keys, tags=tags, properties=properties or None,
                  queue_id=queue_id, born_timestamp=time.time_ns() // 1_000_000)
    check_messages(directory, [msg], cfg)   # refused input never opens (or creates) the store
    with strata.open(directory, cfg) as store:
        if store.recovery_report is not None and store.recovery_report.new_store:
            err.print(f"created a new store at {directory} (no store was there)",
                      markup=False, highlight=False, soft_wrap=True)
        r = store.put(msg)
    click.echo(json.dumps({"status": r.status.name, "msg_id": r.msg_id, "topic": r.topic,
                           "queue_id": r.queue_id, "queue_offset": r.queue_offset,
                           "commitlog_offset": r.commitlog_offset, "size": r.size}))


@cli.command()
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


cli.add_command(refstore_group, "refstore")
cli.add_command(spark_group, "spark")
cli.add_command(tier_group, "tier")
cli.add_command(serve_command, "serve")
cli.add_command(console_command, "console")
cli.add_command(groups_command, "groups")


def main() -> None:
    try:
        cli(standalone_mode=True)
    except StoreNotFoundError as exc:
        err.print(f"error: {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
