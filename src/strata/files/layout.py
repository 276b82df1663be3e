"""The directory layout of a store: every name strata gives a file or folder at the top of a
store directory, in one place (as Kafka's ``LogFileUtils`` owns its file naming).

Everything that builds a path inside a store takes the name from here; ``docs/format.md``
describes what each holds. Names below a folder (segment files named by their 20-digit start
offset, a queue's ``<topic>/<queue id>/`` folders) belong to the layer that owns the folder.
"""

from __future__ import annotations

from pathlib import Path

COMMITLOG_DIR = "commitlog"          # the commit log's segment files
CONSUMEQUEUE_DIR = "consumequeue"    # <topic>/<queue id>/ consume-queue files
INDEX_DIR = "index"                  # the key index's files
CONFIG_DIR = "config"                # topics.json, geometry.json, tier.json
QUARANTINE_DIR = "quarantine"        # damaged pieces recovery kept aside
TIERED_DIR = "tiered"                # the tier's local metadata
BROKER_DIR = "broker"                # the broker's journals (consumer offsets, groups)
CHECKPOINT_NAME = "checkpoint"       # how far queues and index are durable
ABORT_NAME = "abort"                 # exists while a writer runs (unclean shutdown marker)
STATE_NAME = "state"                 # the writer's live offsets, for read-only openers
LOCK_NAME = "lock"                   # the writer's flock
DERIVED_NAME = "derived"             # the derived files' summary (checked at open)

TOPICS_FILE = Path(CONFIG_DIR) / "topics.json"
GEOMETRY_FILE = Path(CONFIG_DIR) / "geometry.json"
TIER_FILE = Path(CONFIG_DIR) / "tier.json"

# What a store directory may hold before its commit log exists (a store being created).
STORE_MARKERS = (COMMITLOG_DIR, CHECKPOINT_NAME, CONFIG_DIR, LOCK_NAME)


class StoreLayout:
    """The paths of one store directory."""

    __slots__ = ("root", "commitlog", "consumequeue", "index", "config", "quarantine")

    def __init__(self, root: str | Path) -> None:
        self.root = root = Path(root)
        self.commitlog = root / COMMITLOG_DIR
        self.consumequeue = root / CONSUMEQUEUE_DIR
        self.index = root / INDEX_DIR
        self.config = root / CONFIG_DIR
        self.quarantine = root / QUARANTINE_DIR

    def is_store(self) -> bool:
        """Whether the directory holds a strata store (its commit-log folder exists)."""
        return self.commitlog.is_dir()


def is_store(root: str | Path) -> bool:
    """Whether ``root`` holds a strata store."""
    return StoreLayout(root).is_store()
