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
import struct
from pathlib import Path

from strata.errors import CorruptStoreError
from strata.files.io import FileOps
from strata.store.config import StoreConfig

GEOMETRY_FILE = Path("config") / "geometry.json"
FIELDS = ("segment_size", "consume_queue_units", "index_slots", "index_entries")

_SEG_HEADER = struct.Struct("<8sHHIQQ")   # magic, version, kind, reserved, base, data_size
_KX_HEADER = struct.Struct("<8sHHII")     # magic, version, reserved, slots, entries


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


def _read(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def _geometry_from_files(root: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    seg = _first_file(root / "commitlog", 1)
    if seg is not None:
        raw = _read(seg, _SEG_HEADER.size)
        if len(raw) == _SEG_HEADER.size:
            magic, _v, _k, _r, _b, size = _SEG_HEADER.unpack(raw)
            if magic == b"STRATASG" and size > 0:
                out["segment_size"] = size
    cq = _first_file(root / "consumequeue", 3)
    if cq is not None:
        raw = _read(cq, _SEG_HEADER.size)
        if len(raw) == _SEG_HEADER.size:
            magic, _v, _k, _r, _b, size = _SEG_HEADER.unpack(raw)
            if magic == b"STRATASG" and size > 0:
                out["consume_queue_units"] = size // 20
    kx = _first_file(root / "index", 1)
    if kx is not None:
        raw = _read(kx, _KX_HEADER.size)
        if len(raw) == _KX_HEADER.size:
            magic, _v, _r, slots, entries = _KX_HEADER.unpack(raw)
            if magic == b"STRATAKX" and slots > 0 and entries > 0:
                out["index_slots"], out["index_entries"] = slots, entries
    return out
