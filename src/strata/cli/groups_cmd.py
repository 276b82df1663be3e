"""``strata groups DIR``: consumer groups with per-queue committed offset, lag and in-flight
deliveries (the console's groups page in the terminal)."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table


@click.command("groups")
@click.argument("directory", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def groups_command(directory: str, as_json: bool) -> None:
    """Consumer groups of the broker on the store in DIR (read-only; `strata serve` may run):
    per topic and queue the committed offset, the max offset, lag, in flight, retrying."""
    from strata.cli.main import open_readonly
    from strata.console.groups_view import GroupSource
    from strata.console.views import ConsoleData
    store = open_readonly(directory)
    with store:
        data = ConsoleData(store, GroupSource(store.path))
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
    for c in ("group", "topic", "queue", "committed", "max offset", "lag", "in flight",
              "retrying"):
        t.add_column(c, justify="left" if c in ("group", "topic") else "right")
    for g in groups:
        for q in g["queues"]:
            t.add_row(g["group"], g["topic"], str(q["queue"]), str(q["committed"]),
                      str(q["max_offset"]), str(q["lag"]), str(q["in_flight"]),
                      str(q["retrying"]))
        t.add_row(g["group"], g["topic"], "all", "", "", str(g["lag"]), str(g["in_flight"]),
                  str(g["retrying"]), style="bold", end_section=True)
    Console().print(t)
    dead = [g for g in groups if g["dead_letters"]]
    for g in dead:
        click.echo(f"{g['group']}: {g['dead_letters']} dead letter(s) in {g['dlq_topic']}")
