"""``strata console DIR --http HOST:PORT``: the web console over a store (docs/console.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click



def parse_http(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) for --http; a usage error naming the problem."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{text!r}: expected HOST:PORT with a port 0-65535",
                                 param_hint="--http")
    return host.strip("[]"), int(port)


@click.command("console")
@click.argument("directory", metavar="DIR")
@click.option("--http", "http", required=True, metavar="HOST:PORT",
              help="Address of the console (port 0: any free port, printed at start).")
@click.option("--acl", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Require a login with an account's accessKey/secretKey from this "
                   "plain_acl.yml (the file `strata serve --acl` takes); only admin accounts "
                   "may act.")
@click.option("--exit-with-parent", is_flag=True,
              help="Stop (cleanly) when the process that started this one exits.")
def console_command(directory: str, http: str, acl: Path | None,
                    exit_with_parent: bool) -> None:
    """Serve the web console for the store in DIR: read-only beside a running writer
    (`strata serve`), else as the store's writer."""
    from strata.console.server import serve_console
    from strata.files.layout import COMMITLOG_DIR, is_store
    host, port = parse_http(http)
    path = Path(directory)
    if not path.is_dir() or not is_store(path):
        raise click.ClickException(f"{directory} is not a strata store (no {COMMITLOG_DIR}/ inside)")
    asyncio.run(serve_console(path, host, port, acl, exit_with_parent))
