"""The store's file geometry (commit-log segment, consume-queue file and key-index sizes),
remembered in ``config/geometry.json`` so that ``strata.open(path)`` without a config, a
read-only opener or a Spark job goes on with the sizes the store was made with (docs/format.md
section 8).

A store written before the file existed has its geometry read back from its files' headers
(every segment and index file records its own size).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from strata.errors import CorruptStoreError
from strata.files.io import FileOps
from strata.format import key_index as kfmt
from strata.format import segment as sfmt
from strata.store.config import StoreConfig

GEOMETRY_FILE = Path("config") / "geometry.json"
FIELDS = ("segment_size", "consume_queue_units", "index_slots", "index_entries")


def stored_geometry(root: str | Path) -> dict[str, int]:
    """The geometry fields known for the store at ``root`` ({} for a new store)."""
    root = Path(root)
    path = root / GEOMETRY_FILE
    try:
        raw = path.read_text("utf-8")
    except FileNotFoundError:
        return _geometry_from_files(root)
    try:
        data = json.loads(raw)
        out = {f: int(data[f]) for f in FIELDS if f in data}
        dataclasses.replace(StoreConfig(), **out).validate()
    except (ValueError, TypeError, KeyError) as exc:
        raise CorruptStoreError(f"{path}: unreadable store geometry ({exc}); open the store "
                                "once with an explicit strata.StoreConfig to rewrite it") from None
    return out


def stored_config(root: str | Path) -> StoreConfig:
    """A StoreConfig with the store's geometry and defaults for everything else."""
    return dataclasses.replace(StoreConfig(), **stored_geometry(root))


def save_geometry(root: str | Path, config: StoreConfig, file_ops: FileOps) -> None:
    """Remember ``config``'s geometry for the store at ``root`` (a writer's open), unless the
    file already says exactly that."""
    path = Path(root) / GEOMETRY_FILE
    data = {"version": 1, **{f: getattr(config, f) for f in FIELDS}}
    try:
        if json.loads(path.read_text("utf-8")) == data:
            return
    except (FileNotFoundError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    file_ops.write_atomic(path, json.dumps(data, indent=1).encode())


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
    for directory, depth, name, per in (("commitlog", 1, "segment_size", 1),
                                        ("consumequeue", 3, "consume_queue_units", 20)):
        seg = _header(_first_file(root / directory, depth), sfmt.SegmentHeader,
                      sfmt.HEADER_BYTES)
        if seg is not None:
            out[name] = seg.data_size // per
    kx = _header(_first_file(root / "index", 1), kfmt.KeyIndexHeader, kfmt.HEADER_BYTES)
    if kx is not None:
        out["index_slots"], out["index_entries"] = kx.slots, kx.entries
    return out
