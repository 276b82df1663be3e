"""``strata groups DIR``: consumer groups with per-queue committed offset, lag and in-flight
deliveries (the console's groups page in the terminal); ``strata groups reset``: a group's
offsets start over (through the running broker when `strata serve` holds the store)."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from strata.cli.admin_cmd import acl_options, through_broker


class _GroupsGroup(click.Group):
    """``strata groups DIR`` (no subcommand) lists, as before ``reset`` existed."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@click.group("groups", cls=_GroupsGroup)
def groups_command() -> None:
    """List consumer groups (strata groups [list] DIR) or reset one's offsets (strata groups
    reset)."""


@groups_command.command("reset")
@click.argument("directory", metavar="DIR")
@click.argument("group")
@click.argument("topic")
@click.option("--offset", type=click.IntRange(0), default=None,
              help="Every queue starts over at this offset (clamped to the queue's bounds).")
@click.option("--time", "time_ms", type=click.IntRange(0), default=None, metavar="MS",
              help="Every queue starts over at its first message stored at or after MS "
                   "(milliseconds since the epoch).")
@acl_options
def groups_reset(directory: str, group: str, topic: str, offset: int | None,
                 time_ms: int | None, access_key: str | None, secret_key: str | None) -> None:
    """GROUP's queues of TOPIC start over at --offset or --time, for RocketMQ groups (their
    deliveries in flight are dropped) and Kafka groups (their committed offsets; a Kafka group
    with members is refused, stop its consumers first)."""
    if (offset is None) == (time_ms is None):
        raise click.UsageError("give --offset or --time, one of them")
    body = {"group": group, "topic": topic, "offset": offset, "time_ms": time_ms}
    got = through_broker(directory, "/groups/reset", body, access_key, secret_key)
    how = "through the running broker"
    if got is None:
        got, how = _reset_here(directory, body), "in the store"
    queues = ", ".join(f"{q}: {o}" for q, o in got["queues"].items())
    click.echo(f"{group} ({'/'.join(got['protocols'])}) on {topic} starts over at "
               f"{queues} ({how})")


def _reset_here(directory: str, body: dict) -> dict:
    """No broker holds the store: open it and its group journal, and reset there."""
    import asyncio
    from pathlib import Path

    from strata.broker.admin import AdminOps, AdminTarget
    from strata.broker.group_state import ConsumerGroups
    from strata.console.groups_view import BROKER_DIR
    from strata.store.message_store import COMMITLOG_DIR, MessageStore
    if not (Path(directory) / COMMITLOG_DIR).is_dir():
        raise click.ClickException(f"{directory} is not a strata store (no {COMMITLOG_DIR}/ "
                                   "inside)")
    with MessageStore(directory, create=False) as store:
        groups = ConsumerGroups(store.path / BROKER_DIR)
        try:
            return asyncio.run(AdminOps(AdminTarget(store, groups)).reset_offsets(body))
        finally:
            groups.close()


@groups_command.command("list")
@click.argument("directory", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def groups_list(directory: str, as_json: bool) -> None:
    """Consumer groups of the broker on the store in DIR (read-only; `strata serve` may run):
    per topic and queue the committed offset, the max offset, lag, in flight, retrying."""
    from strata.cli.common import open_readonly
    from strata.console.groups_view import GroupSource
    from strata.console.views import ConsoleData
    live = _kafka_live(directory)
    store = open_readonly(directory)
    with store:
        data = ConsoleData(store, GroupSource(store.path, kafka_live=lambda: live))
        try:
            groups = data.groups_list()
        finally:
            data.executor.shutdown()
    if as_json:
        click.echo(json.dumps({"groups": groups}, indent=1))
        return
    if not groups:
        click.echo(f"no consumer group has read from {directory}")
        return
    t = Table(title=f"consumer groups of {directory}")
    for c in ("group", "protocol", "topic", "queue", "committed", "max offset", "lag",
              "in flight", "retrying"):
        text = c in ("group", "protocol", "topic")
        # names whole (numbers may wrap first): a piped output is 80 columns wide
        t.add_column(c, justify="left" if text else "right", no_wrap=text)
    for g in groups:
        proto = g["protocol"]
        if proto == "kafka":
            proto += f" ({g['state']}, {len(g['members'])} members)"
        for q in g["queues"]:
            t.add_row(g["group"], proto, g["topic"], str(q["queue"]), str(q["committed"]),
                      str(q["max_offset"]), str(q["lag"]), str(q["in_flight"]),
                      str(q["retrying"]))
        t.add_row(g["group"], proto, g["topic"], "all", "", "", str(g["lag"]),
                  str(g["in_flight"]), str(g["retrying"]), style="bold", end_section=True)
    Console().print(t)
    dead = [g for g in groups if g["dead_letters"]]
    for g in dead:
        click.echo(f"{g['group']}: {g['dead_letters']} dead letter(s) in {g['dlq_topic']}")


def _kafka_live(directory: str) -> dict:
    """The Kafka groups' live state (members) from the running broker's admin API; empty
    when no broker runs or it does not answer (the journal's committed offsets still show,
    as Empty groups)."""
    try:
        got = through_broker(directory, "/groups/kafka", {}, None, None)
    except click.ClickException:
        return {}
    return got or {}
