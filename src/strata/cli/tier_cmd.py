"""``strata tier stat|sync|verify DIR``: a store's tier — what it holds, upload now, check it.

The tier a store uses is remembered in ``DIR/tiered/metadata.log`` (written by the first
upload), so these commands need only the store directory; ``sync`` takes ``--tier-url`` for a
store that has never uploaded.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

import strata
from strata.cli.spark_cmd import _require_store
from strata.errors import StrataError
from strata.store.geometry import stored_config
from strata.store.message_store import writer_alive
from strata.store.tier_config import stored_tier
from strata.tiered import TierService
from strata.tiered.connect import open_backend
from strata.tiered.metadata import LOCAL_DIR, LOCAL_FILE, TierMetadata, read_local, read_tier
from strata.tiered.reader import TieredQueueReader
from strata.words import count

console = Console(soft_wrap=True)  # paths and URLs stay on one line
err = Console(stderr=True)


@click.group("tier")
def tier_group() -> None:
    """Tiered storage of a store DIR (README "Tiered storage")."""


def _metadata(path: Path) -> TierMetadata:
    meta = read_local(path)
    if meta is None:
        raise click.ClickException(
            f"{path} has no tier yet (no {LOCAL_DIR}/{LOCAL_FILE}); open it with "
            "StoreConfig.tier_url, or run `strata tier sync --tier-url URL DIR`")
    return meta


def _local_max(path: Path) -> dict[tuple[str, int], int]:
    """Every queue's max offset, read-only (empty if the store cannot be opened so)."""
    try:
        with strata.open(path, readonly=True) as store:
            return {(t, q): store.max_offset(t, q) for t in store.topics()
                    for q in range(store.queue_count(t))}
    except StrataError as exc:
        err.print(f"[yellow]local queues unreadable: {exc}[/]")
        return {}


@tier_group.command()
@click.argument("directory", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def stat(directory: str, as_json: bool) -> None:
    """What the tier holds per queue, how far each queue lags, whether the tier answers."""
    path = _require_store(directory)
    meta = _metadata(path)
    local = _local_max(path)
    try:
        theirs, _v = read_tier(open_backend(meta.tier_url, meta.endpoint_url))
        reach = {"reachable": True, "tier_generation": theirs.generation if theirs else None,
                 "error": None}
    except StrataError as exc:
        reach = {"reachable": False, "tier_generation": None, "error": str(exc)}
    rows = []
    for key in sorted(set(local) | {(q.topic, q.queue_id) for q in meta.queues.values()}):
        q = meta.queue(*key)
        done = q.next_offset if q else 0
        rows.append({"topic": key[0], "queue": key[1],
                     "tier_min": q.min_offset() if q else 0, "tier_max": q.max_offset() if q else 0,
                     "chunks": len(q.chunks) if q else 0, "bytes": q.bytes() if q else 0,
                     "local_max": local.get(key, 0),
                     "lag": max(0, local.get(key, 0) - done), "skipped": q.skipped if q else 0})
    summary = {"tier_url": meta.tier_url, "endpoint_url": meta.endpoint_url,
               "store_id": meta.store_id, "generation": meta.generation, **reach,
               "messages": sum(r["tier_max"] - r["tier_min"] for r in rows),
               "bytes": sum(r["bytes"] for r in rows), "lag": sum(r["lag"] for r in rows)}
    if as_json:
        print(json.dumps({**summary, "queues": rows}))
        return
    head = Table(show_header=False, box=None)
    for k, v in summary.items():
        head.add_row(k, f"[red]{v}[/]" if k == "error" and v else str(v))
    console.print(head)
    t = Table(*["topic", "queue", "tier offsets", "chunks", "bytes", "local max", "lag",
                "skipped"])
    for r in rows:
        t.add_row(r["topic"], str(r["queue"]), f"{r['tier_min']}..{r['tier_max']}",
                  str(r["chunks"]), f"{r['bytes']:,}", str(r["local_max"]),
                  str(r["lag"]), str(r["skipped"]))
    console.print(t)


@tier_group.command()
@click.argument("directory", metavar="DIR")
@click.option("--tier-url", default=None, help="The tier (file:///abs/dir or s3://bucket/"
              "prefix); default: the one the store already uses.")
@click.option("--endpoint-url", default=None, help="S3-compatible endpoint URL.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=3600.0,
              show_default=True, help="Give up after this many seconds of retrying what can "
              "succeed later (an unreachable endpoint); no credentials, no bucket or access "
              "denied fail at once.")
def sync(directory: str, tier_url: str | None, endpoint_url: str | None,
         timeout_s: float) -> None:
    """Upload everything the store has confirmed to its tier, with a progress bar."""
    from strata.cli.common import _progress
    path = _require_store(directory)
    if writer_alive(path):
        raise click.ClickException(f"{directory} is open for writing by another process; "
                                   "call store.tier_sync() there instead")
    # the tier it uploaded to, or the one it was opened with (config/tier.json)
    known = read_local(path) or stored_tier(path)
    if tier_url is None and known is None:
        raise click.ClickException(f"{directory} has no tier yet: give --tier-url")
    url = tier_url or known.tier_url
    endpoint = endpoint_url or (known.endpoint_url if known else None)
    cfg = dataclasses.replace(stored_config(path), tier_url=url, tier_endpoint_url=endpoint)
    cfg.validate()
    with strata.open(path, cfg) as store:
        tier: TierService = store.tier
        store.wait_dispatched()
        total = sum(tier.dispatcher.lag().values())
        with _progress() as bar:
            task = bar.add_task("uploading", total=total or None)
            tier.sync(timeout_s, on_chunk=lambda n, _b: bar.advance(task, n))
        up = tier.dispatcher.uploaded
    console.print(f"uploaded {count(up.messages, 'message')} ({count(up.bytes, 'byte')}) in "
                  f"{count(up.chunks, 'chunk')} to {url}")


@tier_group.command()
@click.argument("directory", metavar="DIR")
@click.option("--from-tier", is_flag=True,
              help="Use the tier's own metadata copy instead of DIR's.")
def verify(directory: str, from_tier: bool) -> None:
    """Check every tiered record's CRC, the .cq/.keys checksums and object sizes."""
    from strata.cli.common import _progress
    path = _require_store(directory)
    meta = _metadata(path)
    backend = open_backend(meta.tier_url, meta.endpoint_url)
    reader = TieredQueueReader.from_tier(backend) if from_tier else \
        TieredQueueReader(backend, meta)
    total = sum(q.bytes() for q in reader.metadata.queues.values())
    with _progress() as bar:
        task = bar.add_task("verifying", total=total or None)
        report = reader.verify(on_chunk=lambda b: bar.advance(task, b))
    for p in report.problems:
        console.print(f"[red]{p}[/]")
    console.print(f"{count(report.chunks, 'chunk')}, {count(report.messages, 'message')}, "
                  f"{count(report.bytes, 'byte')} checked on {meta.tier_url}: "
                  f"{'OK' if report.ok else count(len(report.problems), 'problem')}")
    if not report.ok:
        sys.exit(1)
