"""The store config the Spark source and sink open a store with: the store's own geometry
(strata.store.geometry: config/geometry.json, or its files' headers for older stores), so any
store opens without options."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from strata.files.layout import is_store
import strata
from strata.errors import StoreNotFoundError
from strata.store.geometry import stored_config


def store_config(path: str | Path, *, for_writing: bool = False) -> strata.StoreConfig:
    """A StoreConfig whose geometry matches the store at ``path`` (defaults where nothing says)."""
    root = Path(path)
    if not is_store(root):
        raise StoreNotFoundError(f"no strata store at {root} (no commitlog/ inside)")
    cfg = stored_config(root)
    if for_writing:  # a short-lived commit: do not pre-fault the next segment
        cfg = dataclasses.replace(cfg, prefault=False)
    return cfg


def open_readonly(path: str | Path) -> strata.MessageStore:
    """The store read-only, answering from its local files alone: the Spark source reads the
    store's tier itself, in tasks of its own."""
    return strata.MessageStore(path, store_config(path), readonly=True, local_only=True)
