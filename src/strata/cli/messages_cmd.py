"""``strata get``, ``query`` and ``put``: reading a queue or a key's messages, appending one."""

from __future__ import annotations

import json
import sys
import time

import click

import strata
from strata.cli.common import _message_dict, _require_queue, err, open_readonly
from strata.store.config import StoreConfig
from strata.store.geometry import stored_geometry
from strata.store.message import Message
from strata.store.message_store import check_messages


@click.command()
@click.argument("directory", metavar="DIR")
@click.argument("topic")
@click.argument("queue", type=click.IntRange(0))
@click.argument("offset", type=click.IntRange(0))
@click.option("-n", "--max-messages", type=click.IntRange(1), default=32, show_default=True,
              help="Read at most this many messages.")
@click.option("--tags", default=None, help='Tag filter, e.g. "a||b".')
def get(directory: str, topic: str, queue: int, offset: int, max_messages: int,
        tags: str | None) -> None:
    """Read messages of TOPIC's queue QUEUE (0, 1, ...) from queue offset OFFSET: one JSON
    line per message on stdout, the status and the next offset to read on stderr. Opens DIR
    read-only (works beside a running writer); a topic or queue DIR lacks is an error."""
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


@click.command()
@click.argument("directory", metavar="DIR")
@click.argument("topic")
@click.argument("key")
@click.option("--begin-ms", type=click.IntRange(0), default=0, show_default=True,
              help="Only messages stored at or after this time (ms since the epoch).")
@click.option("--end-ms", default=None, type=int,
              help="Only messages stored at or before this time (ms; default: now).")
@click.option("-n", "--max-results", type=click.IntRange(1), default=64, show_default=True,
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


@click.command()
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
    """Append one message to TOPIC (body from --body or stdin, born now); prints its
    PutResult as JSON. Creates the topic (8 queues) if DIR lacks it, and the store, saying so
    on stderr, if DIR holds none; a store another process writes (`strata serve`) is refused."""
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
