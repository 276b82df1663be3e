"""Starting a store: fold leftover GC temp files, load a clean snapshot, or rebuild from scan.

Dirty recovery trusts nothing but the data files and the caller's reference counts: every
checksummed record whose id the caller still references is claimed by its first copy (files
oldest first, lowest offset first), so duplicates left by an interrupted GC are harmless.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from strata.format import refstore_record as rec
from strata.files.io import file_ops, fsync_dir

from . import layout, snapshot
from .errors import CorruptSnapshotError
from .files import read_file, scan_columns, truncate_and_sync
from .index import MessageIndex, keys_of
from .summary import FileSummary

KEEP_ALL = "keep-all"
"""Pass as ``recover_refs`` to salvage: every message found on disk gets one reference."""


@dataclass
class Recovered:
    index: MessageIndex
    summary: FileSummary
    clean: bool
    client_refs: list[str] = field(default_factory=list)
    folded_temp_files: list[int] = field(default_factory=list)
    dropped_refs: int = 0          # referenced by the caller but found nowhere on disk
    scanned_bytes: int = 0
    reason: str = ""               # why the dirty path was taken


def fold_temp_files(directory: str) -> list[int]:
    """Append each leftover ``N.rst`` to ``N.rsd`` (the copies it holds may be duplicates)."""
    folded = []
    for number in layout.list_temp_files(directory):
        tmp = layout.temp_path(directory, number)
        dst = layout.data_path(directory, number)
        data = read_file(tmp)
        if data:
            with open(dst, "ab") as f:
                f.write(data)
                f.flush()
                file_ops().fsync(dst, f.fileno())
        os.unlink(tmp)
        folded.append(number)
    if folded:
        fsync_dir(directory)
    return folded


def count_refs(recover_refs: Iterable) -> dict[bytes, int]:
    """Sum the caller's (msg_id, delta) pairs; keep ids whose count ends above zero."""
    counts: dict[bytes, int] = {}
    get = counts.get
    for item in recover_refs:
        try:
            msg_id, delta = item
        except (TypeError, ValueError):
            raise rec.InvalidInputError(
                f"recover_refs must yield (msg_id, delta) pairs, got {item!r}") from None
        if type(msg_id) is not bytes or len(msg_id) != rec.MSG_ID_SIZE:
            msg_id = rec.check_msg_id(msg_id)
        if type(delta) is not int:
            raise rec.InvalidInputError(
                f"recover_refs delta for {msg_id.hex()} must be an int, got {delta!r}")
        counts[msg_id] = get(msg_id, 0) + delta
    return {m: c for m, c in counts.items() if c > 0}


def rebuild(directory: str, recover_refs, reason: str) -> Recovered:
    """Dirty start: scan every data file and index the records the caller references."""
    folded = fold_temp_files(directory)
    keep_all = isinstance(recover_refs, str) and recover_refs == KEEP_ALL
    wanted = None if keep_all else count_refs(recover_refs)
    index = MessageIndex()
    summary = FileSummary()
    numbers = layout.list_data_files(directory)
    scanned = 0
    for i, number in enumerate(numbers):
        path = layout.data_path(directory, number)
        data = read_file(path)
        scanned += len(data)
        offs, totals, ids = scan_columns(data)
        last_end = offs[-1] + totals[-1] if offs else 0
        if not keep_all:                        # only the messages the owners reference
            keep = [j for j, m in enumerate(ids) if m in wanted]
            offs = [offs[j] for j in keep]
            totals = [totals[j] for j in keep]
            ids = [ids[j] for j in keep]
        valid = _enter_first_copies(index, offs, totals, ids, number, wanted)
        is_last = i == len(numbers) - 1
        size = len(data)
        if is_last and size != last_end:
            truncate_and_sync(path, last_end)   # a torn tail: appends resume after it
            size = last_end
        summary.add(number, valid, size)
    dropped = 0 if keep_all else len(wanted) - len(index)
    return Recovered(index, summary, False, [], folded, dropped, scanned, reason)


def load_clean(directory: str, snap: snapshot.Snapshot) -> Recovered:
    """Clean start: install the saved index and summary, after checking the files agree."""
    on_disk = set(layout.list_data_files(directory))
    summary = FileSummary()
    for row in snap.rows:
        if row.number not in on_disk:
            raise CorruptSnapshotError(
                f"the saved summary lists data file {layout.data_name(row.number)}, "
                f"which is missing")
        actual = os.path.getsize(layout.data_path(directory, row.number))
        if actual < row.size:
            raise CorruptSnapshotError(
                f"data file {layout.data_name(row.number)} is {actual} bytes, shorter than "
                f"the {row.size} bytes the saved summary records")
        summary.add(row.number, row.valid, row.size)
    unknown = sorted(on_disk - set(summary.files))
    if unknown:
        raise CorruptSnapshotError(
            f"data files {[layout.data_name(n) for n in unknown]} are not in the saved summary")
    newest = summary.newest()
    if newest is not None:
        path = layout.data_path(directory, newest.number)
        if os.path.getsize(path) != newest.size:
            truncate_and_sync(path, newest.size)
    index = MessageIndex()
    index.load_base(snap.ids_raw, snap.ref, snap.file, snap.offset, snap.size)
    return Recovered(index, summary, True, list(snap.client_refs))


def _enter_first_copies(index: MessageIndex, offs: list, totals: list, ids: list, number: int,
                        wanted) -> int:
    """Enter the records (``offs``, ``totals``, ``ids``, in file order) of file ``number``
    whose ids the index does not hold yet — an earlier file's or record's copy wins — with
    their count from ``wanted`` (1 each if None); returns the bytes entered."""
    if not ids:
        return 0
    n = len(ids)
    sizes = np.array(totals, dtype=np.int64)
    refs = np.ones(n, dtype=np.int64) if wanted is None else \
        np.fromiter(map(wanted.__getitem__, ids), dtype=np.int64, count=n)
    inserted = index.insert_absent(keys_of(b"".join(ids)), refs, number,
                                   np.array(offs, dtype=np.int64), sizes)
    return int(sizes[inserted].sum())
