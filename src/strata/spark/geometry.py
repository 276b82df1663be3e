"""Learn a store's file geometry from its files, so the source opens any store without options.

strata does not record its StoreConfig; segment, consume-queue and key-index sizes must match the
files, and every file header records its own size (docs/format.md sections 2 and 10).
"""

from __future__ import annotations

import struct
from pathlib import Path

import strata
from strata.errors import StoreNotFoundError

_SEG_HEADER = struct.Struct("<8sHHIQQ")   # magic, version, kind, reserved, base, data_size
_KX_HEADER = struct.Struct("<8sHHII")     # magic, version, reserved, slots, entries


def _first_file(directory: Path, depth: int) -> Path | None:
    if not directory.is_dir():
        return None
    pattern = "/".join(["*"] * depth)
    for p in sorted(directory.glob(pattern)):
        if p.is_file() and p.name.isdigit() and len(p.name) == 20:
            return p
    return None


def _read(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def store_config(path: str | Path, *, for_writing: bool = False) -> strata.StoreConfig:
    """A StoreConfig whose geometry matches the store at ``path`` (defaults where no file says)."""
    root = Path(path)
    if not (root / "commitlog").is_dir():
        raise StoreNotFoundError(f"no strata store at {root} (no commitlog/ inside)")
    kw: dict = {}
    seg = _first_file(root / "commitlog", 1)
    if seg is not None:
        magic, _v, _k, _r, _b, size = _SEG_HEADER.unpack(_read(seg, _SEG_HEADER.size))
        if magic == b"STRATASG" and size > 0:
            kw["segment_size"] = size
    cq = _first_file(root / "consumequeue", 3)
    if cq is not None:
        magic, _v, _k, _r, _b, size = _SEG_HEADER.unpack(_read(cq, _SEG_HEADER.size))
        if magic == b"STRATASG" and size > 0:
            kw["consume_queue_units"] = size // 20
    kx = _first_file(root / "index", 1)
    if kx is not None:
        magic, _v, _r, slots, entries = _KX_HEADER.unpack(_read(kx, _KX_HEADER.size))
        if magic == b"STRATAKX" and slots > 0 and entries > 0:
            kw["index_slots"], kw["index_entries"] = slots, entries
    if for_writing:
        kw["prefault"] = False  # a short-lived commit: do not pre-fault the next segment
    return strata.StoreConfig(**kw)


def open_readonly(path: str | Path) -> strata.MessageStore:
    return strata.open(path, store_config(path), readonly=True)
