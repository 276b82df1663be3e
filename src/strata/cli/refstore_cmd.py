"""``strata refstore``: inspect, verify and compact a reference-counted message store."""

from __future__ import annotations

import os
import threading

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from strata.errors import StrataError, StoreLockedError
from strata.format import refstore_record as rec
from strata.refstore import layout, snapshot
from strata.refstore.errors import CorruptSnapshotError, RecoveryNeedsRefsError
from strata.words import count

_DIR = click.Path(exists=True, file_okay=False, dir_okay=True, readable=True)


def _files_or_fail(directory: str) -> list[int]:
    numbers = layout.list_data_files(directory)
    if not numbers and not snapshot.exists(directory):
        raise click.ClickException(
            f"{directory!r} holds no ref-store files (expected NNNNNNNNNN{layout.DATA_SUFFIX})")
    return numbers


def _load_snapshot(directory: str):
    """The clean-shutdown state, or (None, reason) if there is none or it is damaged."""
    if not snapshot.exists(directory):
        return None, "no clean-shutdown state (the store is open, or was not closed cleanly)"
    try:
        return snapshot.load(directory), ""
    except CorruptSnapshotError as exc:
        return None, f"clean-shutdown state unusable: {exc}"


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(),
                    TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
                    TimeElapsedColumn(), console=console, transient=True)


@click.group("refstore")
def refstore_group() -> None:
    """Inspect and maintain a reference-counted message store directory."""


@refstore_group.command("stat")
@click.argument("directory", type=_DIR)
def stat_cmd(directory: str) -> None:
    """Files, live/total bytes and the garbage ratio of the store in DIRECTORY."""
    console = Console(soft_wrap=True)
    numbers = _files_or_fail(directory)
    snap, why = _load_snapshot(directory)
    rows = {r.number: r for r in snap.rows} if snap else {}
    table = Table(title=f"ref store {directory}")
    for col in ("file", "size", "live", "garbage"):
        table.add_column(col, justify="right")
    total = live = 0
    for n in numbers:
        size = os.path.getsize(layout.data_path(directory, n))
        total += size
        row = rows.get(n)
        if row is not None:
            live += row.valid
            garbage = f"{1 - row.valid / size:.1%}" if size else "-"
            table.add_row(layout.data_name(n), f"{size:,}", f"{row.valid:,}", garbage)
        else:
            table.add_row(layout.data_name(n), f"{size:,}", "?", "?")
    console.print(table)
    console.print(f"files: {len(numbers)}  total bytes: {total:,}")
    if snap is not None:
        ratio = 1 - live / total if total else 0.0
        messages = int((snap.ref > 0).sum())
        console.print(f"live bytes: {live:,}  garbage ratio: {ratio:.3f}  "
                      f"messages: {messages:,}  index entries: {len(snap.ref):,}  "
                      f"clients: {len(snap.client_refs)}  file size limit: "
                      f"{snap.file_size_limit:,}")
    else:
        console.print(f"live bytes: unknown ({why})")
    temps = layout.list_temp_files(directory)
    if temps:
        console.print(f"leftover GC temp files (folded back at next start): "
                      f"{[layout.temp_name(t) for t in temps]}")


@refstore_group.command("verify")
@click.argument("directory", type=_DIR)
def verify_cmd(directory: str) -> None:
    """Check every record's checksum and, after a clean shutdown, the saved index."""
    console = Console(soft_wrap=True)
    numbers = _files_or_fail(directory)
    problems: list[str] = []
    found: dict[int, dict[int, tuple[int, bytes]]] = {}
    records = 0
    sizes = {n: os.path.getsize(layout.data_path(directory, n)) for n in numbers}
    with _progress(console) as progress:
        task = progress.add_task("scanning data files", total=sum(sizes.values()) or 1)
        for n in numbers:
            with open(layout.data_path(directory, n), "rb") as f:
                data = f.read()
            spans = {}
            for off, total, msg_id in rec.scan(data):
                spans[off] = (total, msg_id)
            records += len(spans)
            found[n] = spans
            for off, length in rec.damaged_regions(data):
                problems.append(f"{layout.data_name(n)}: {length} bytes at offset {off} are "
                                f"not a whole, checksummed record")
            progress.advance(task, len(data))
    snap, why = _load_snapshot(directory)
    if snap is not None:
        rows = {r.number: r for r in snap.rows}
        if sorted(rows) != numbers:
            problems.append(f"saved summary lists files {sorted(rows)}, directory has {numbers}")
        valid: dict[int, int] = {}
        ids = snap.ids_raw
        for i, (ref, file, off, size) in enumerate(zip(snap.ref.tolist(), snap.file.tolist(),
                                                        snap.offset.tolist(),
                                                        snap.size.tolist())):
            if ref <= 0:
                continue
            msg_id = ids[i * 16:i * 16 + 16]
            got = found.get(file, {}).get(off)
            if got != (size, msg_id):
                problems.append(f"message {msg_id.hex()} (refs {ref}) should be at "
                                f"{layout.data_name(file)} offset {off}, but no such record is")
            valid[file] = valid.get(file, 0) + size
        for n, row in rows.items():
            if valid.get(n, 0) != row.valid:
                problems.append(f"{layout.data_name(n)}: summary says {row.valid:,} live bytes, "
                                f"the index adds up to {valid.get(n, 0):,}")
    elif "unusable" in why:
        problems.append(why)
    for t in layout.list_temp_files(directory):
        console.print(f"note: leftover GC temp file {layout.temp_name(t)} "
                      f"(folded back at next start)")
    for p in problems:
        console.print(f"[red]problem:[/red] {p}")
    checked = "records and saved index" if snap is not None else f"records ({why})"
    console.print(f"{count(len(numbers), 'file')}, {count(records, 'whole record')}; checked {checked}")
    if problems:
        raise click.ClickException(f"{len(problems)} problem(s) found")
    console.print("[green]ok[/green]")


@refstore_group.command("compact")
@click.argument("directory", type=_DIR)
@click.option("--ratio", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=None, help="garbage ratio to compact down to (default: the store's 0.5)")
def compact_cmd(directory: str, ratio: float | None) -> None:
    """Run the GC on a cleanly closed store until its garbage ratio is below the threshold."""
    import strata.refstore as rs
    console = Console(soft_wrap=True)
    _files_or_fail(directory)
    snap, why = _load_snapshot(directory)
    if snap is None:
        raise click.ClickException(
            f"cannot compact {directory!r}: {why}. Reopen it from its owner (with "
            f"recover_refs) and close it cleanly first.")
    options = {"file_size_limit": snap.file_size_limit, "auto_gc": False}
    if ratio is not None:
        options["gc_garbage_ratio"] = ratio
    try:
        store = rs.open(directory, "persistent", **options)
    except StoreLockedError as exc:
        raise click.ClickException(str(exc)) from None
    except RecoveryNeedsRefsError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        before = store.stats()
        result: dict = {}

        def run() -> None:
            try:
                result["stats"] = store.compact()
            except BaseException as exc:   # reported below
                result["error"] = exc

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        with _progress(console) as progress:
            garbage0 = max(before.total_bytes - before.valid_bytes, 1)
            task = progress.add_task("compacting (garbage bytes reclaimed)", total=garbage0)
            while worker.is_alive():
                worker.join(0.2)
                st = store.stats()
                progress.update(task, completed=garbage0 - (st.total_bytes - st.valid_bytes))
        if "error" in result:
            raise click.ClickException(f"compaction failed: {result['error']}")
        after = result["stats"]
    finally:
        try:
            store.close()
        except StrataError as exc:   # pragma: no cover - reported
            raise click.ClickException(f"closing the store failed: {exc}") from None
    console.print(
        f"files {len(before.files)} -> {len(after.files)}, total bytes "
        f"{before.total_bytes:,} -> {after.total_bytes:,}, garbage ratio "
        f"{before.garbage_ratio:.3f} -> {after.garbage_ratio:.3f}, combines "
        f"{after.gc_combines}, files deleted {after.gc_deletes}")
