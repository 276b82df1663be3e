"""The store's file geometry (commit-log segment, consume-queue file and key-index sizes),
remembered in ``config/geometry.json`` so that ``strata.open(path)`` without a config, a
read-only opener or a Spark job goes on with the sizes the store was made with (docs/format.md
section 8).

A store written before the file existed has its geometry read back from its files' headers
(every segment and index file records its own size).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from strata.errors import CorruptStoreError
from strata.files.io import FileOps
from strata.files.layout import COMMITLOG_DIR, CONSUMEQUEUE_DIR, GEOMETRY_FILE, INDEX_DIR
from strata.format import key_index as kfmt
from strata.format import segment as sfmt
from strata.index.key_index import FIRST_ENTRIES, FIRST_SLOTS
from strata.store.config import StoreConfig

log = logging.getLogger(__name__)

FIELDS = ("segment_size", "consume_queue_units", "index_slots", "index_entries")


def stored_geometry(root: str | Path) -> dict[str, int]:
    """The geometry fields known for the store at ``root`` ({} for a new store).

    A damaged ``config/geometry.json`` is recovered from the files' headers when they give
    every field (the sizes the files were made with are the truth); otherwise it is a
    CorruptStoreError that names the file and how to repair it."""
    root = Path(root)
    path = root / GEOMETRY_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return _geometry_from_files(root)
    problem = geometry_problem(raw)
    if problem is None:
        data = json.loads(raw)
        return {f: int(data[f]) for f in FIELDS if f in data}
    recovered = _geometry_from_files(root)
    if set(recovered) == set(FIELDS):
        log.warning("%s: %s; using the sizes in the store's file headers instead (%s)", path,
                    problem, ", ".join(f"{k}={v}" for k, v in recovered.items()))
        return recovered
    raise CorruptStoreError(
        f"{path}: {problem}, and the store's file headers do not give every size (found "
        f"{', '.join(sorted(recovered)) or 'none'}); open the store once with an explicit "
        "strata.StoreConfig holding the sizes it was made with to rewrite the file")


def geometry_problem(raw: bytes) -> str | None:
    """What is wrong with the bytes of a geometry file (None: nothing)."""
    try:
        data = json.loads(raw)    # bytes: a byte that is not UTF-8 is a ValueError too
        if not isinstance(data, dict):
            raise TypeError(f"a JSON object expected, found {type(data).__name__}")
        out = {f: int(data[f]) for f in FIELDS if f in data}
        StoreConfig(**out).validate()
    except (ValueError, TypeError, KeyError) as exc:
        return f"unreadable store geometry ({exc})"
    return None


def stored_config(root: str | Path) -> StoreConfig:
    """A StoreConfig with the store's geometry and defaults for everything else."""
    return StoreConfig(**stored_geometry(root))


def save_geometry(root: str | Path, config: StoreConfig, file_ops: FileOps, *,
                  explicit: bool = True) -> str | None:
    """Remember ``config``'s geometry for the store at ``root`` (a writer's open), unless the
    file already says exactly that. A config the caller did not give (``explicit=False``: the
    store's own geometry, defaults for what it does not know) only ever writes a missing or
    damaged file, never replaces what the file remembers. Returns what it repaired (None:
    nothing)."""
    path = Path(root) / GEOMETRY_FILE
    data = {"version": 1, **{f: getattr(config, f) for f in FIELDS}}
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = None
    repaired = None
    if raw is not None:
        problem = geometry_problem(raw)
        if problem is None and (not explicit or json.loads(raw) == data):
            return None
        if problem is not None:
            repaired = (f"{path}: {problem}; rewritten with "
                        f"{', '.join(f'{f}={data[f]}' for f in FIELDS)}")
            log.warning("%s", repaired)
    path.parent.mkdir(parents=True, exist_ok=True)
    file_ops.write_atomic(path, json.dumps(data, indent=1).encode())
    return repaired


def _first_file(directory: Path, depth: int) -> Path | None:
    if not directory.is_dir():
        return None
    for p in sorted(directory.glob("/".join(["*"] * depth))):
        if p.is_file() and p.name.isdigit() and len(p.name) == 20:
            return p
    return None


def _header(path: Path | None, header_class, size: int):
    """The checked header at the start of ``path`` (``header_class.decode``), or None."""
    if path is None:
        return None
    with open(path, "rb") as f:
        raw = f.read(size)
    try:
        return header_class.decode(raw)
    except ValueError:        # not a whole, valid header: say nothing about the geometry
        return None


def _geometry_from_files(root: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for directory, depth, name, per in ((COMMITLOG_DIR, 1, "segment_size", 1),
                                        (CONSUMEQUEUE_DIR, 3, "consume_queue_units", 20)):
        seg = _header(_first_file(root / directory, depth), sfmt.SegmentHeader,
                      sfmt.HEADER_BYTES)
        if seg is not None:
            out[name] = seg.data_size // per
    kx = _header(_first_file(root / INDEX_DIR, 1), kfmt.KeyIndexHeader, kfmt.HEADER_BYTES)
    # A first key-index file of the growing size (docs/format.md section 10) says only that the
    # configured geometry is at least that: the defaults then, not a store of small files.
    if kx is not None and (kx.slots, kx.entries) != (FIRST_SLOTS, FIRST_ENTRIES):
        out["index_slots"], out["index_entries"] = kx.slots, kx.entries
    return out
