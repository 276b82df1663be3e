"""The store's tier, remembered in ``config/tier.json`` (docs/format.md section 8), so that an
open without ``tier_url`` — ``strata.open(path)``, a read-only opener, the CLI — reads the
store's tiered history too, and an open naming another tier is refused before anything runs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from strata.errors import CorruptStoreError, InvalidConfigError
from strata.files.io import FileOps
from strata.files.layout import TIER_FILE
from strata.store.config import StoreConfig
from strata.store.tier_url import check_endpoint_url, parse_tier_url


@dataclasses.dataclass(frozen=True)
class StoredTier:
    tier_url: str
    endpoint_url: str | None


def stored_tier(root: str | Path) -> StoredTier | None:
    """The tier remembered for the store at ``root`` (None: it has none). A damaged file is a
    CorruptStoreError naming it (the store's tier cannot be guessed)."""
    path = Path(root) / TIER_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("version") != 1 or \
                set(doc) != {"version", "tier_url", "endpoint_url"}:
            raise ValueError('expected {"version": 1, "tier_url": ..., "endpoint_url": ...}')
        parse_tier_url(doc["tier_url"])
        check_endpoint_url(doc["endpoint_url"])
    except (ValueError, TypeError, InvalidConfigError) as exc:
        raise CorruptStoreError(
            f"{path}: unreadable tier settings ({exc}); open the store once with "
            "StoreConfig(tier_url=...) naming its tier to rewrite the file") from None
    return StoredTier(doc["tier_url"], doc["endpoint_url"])


def with_stored_tier(root: str | Path, config: StoreConfig) -> StoreConfig:
    """``config`` with the store's remembered tier: a config without ``tier_url`` takes it
    (and its endpoint, unless the config names one); a config naming another tier is an
    InvalidConfigError (the store's history lies on its own tier)."""
    if not Path(root).is_dir():
        return config
    if config.tier_url is None and not (Path(root) / TIER_FILE).exists():
        return config
    try:
        have = stored_tier(root)
    except CorruptStoreError:
        if config.tier_url is None:
            raise
        return config      # a writer's open rewrites the file with this tier
    if have is None:
        return config
    if config.tier_url is None:
        return dataclasses.replace(config, tier_url=have.tier_url,
                                   tier_endpoint_url=config.tier_endpoint_url or have.endpoint_url)
    if parse_tier_url(config.tier_url).url != parse_tier_url(have.tier_url).url:
        raise InvalidConfigError(
            f"StoreConfig.tier_url={config.tier_url!r}: store {root}'s tier is "
            f"{have.tier_url} ({TIER_FILE}), and its history lies there; give that URL (or "
            "none), or move the tier's objects and then the store's tier files together")
    return config


def save_tier(root: str | Path, config: StoreConfig, file_ops: FileOps) -> None:
    """Remember ``config``'s tier (a writer's open with a ``tier_url``), unless the file
    already says exactly that."""
    if config.tier_url is None:
        return
    path = Path(root) / TIER_FILE
    data = json.dumps({"version": 1, "tier_url": config.tier_url,
                       "endpoint_url": config.tier_endpoint_url}, indent=1).encode()
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    file_ops.write_atomic(path, data)
