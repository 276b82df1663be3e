"""What the ``strata`` commands share: the consoles, progress bar, read-only opener, a
message as JSON, byte sizes, and the check that a topic or queue exists."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.progress import (BarColumn, Progress, TaskProgressColumn, TextColumn,
                           TimeRemainingColumn, TransferSpeedColumn)

import strata
from strata.errors import StrataError
from strata.files.layout import COMMITLOG_DIR
from strata.store.message_store import MessageStore

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


def human(n: int) -> str:
    """``n`` bytes in binary units: 512 B, 1.5 KiB, 515.0 MiB, 1.00 GiB."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.2f} {unit}" if n < 10 else f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


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


def reader_gone() -> NoReturn:
    """The reader of our output went away (``strata get ... | head -1``): stop without a
    word and exit 0, as ``scan`` always did, and without Python's second complaint when it
    flushes stdout at exit (stdout now leads to /dev/null)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(0)
