"""``strata topics`` (list, create, add-queues, delete) and ``strata stat``: a store's topics
and its queues' offsets and disk use."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

import strata
from strata.cli.admin_cmd import acl_options, through_broker
from strata.cli.common import _require_queue, console, err, human, open_readonly
from strata.errors import StrataError
from strata.files.layout import COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR
from strata.format.record import encode_topic
from strata.store.message_store import MessageStore
from strata.store.topics import TopicTable, TopicType, check_new_topic
from strata.words import count


class _TopicsGroup(click.Group):
    """``strata topics DIR`` (no subcommand) still lists, as before ``create`` existed."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_TopicsGroup)
def topics() -> None:
    """List topics (strata topics [list] DIR), create one (strata topics create), give one
    more queues (add-queues) or delete one (delete)."""


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


@click.command()
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
