"""``StoreConfig``: every tunable of an embedded store, with RocketMQ-like defaults."""

from __future__ import annotations

from dataclasses import dataclass, fields

from strata.errors import InvalidConfigError, StrataError
from strata.format import record as rec
from strata.store.tier_url import check_endpoint_url, parse_tier_url

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_MAX_BODY = 4 * MiB


def body_capacity(segment_size: int, store_host: tuple[str, int]) -> int:
    """The largest body a segment of ``segment_size`` bytes can hold: one record with a
    one-character topic, no properties and the store's host as born and store host, leaving
    room for the blank record that ends a segment."""
    try:
        host = len(rec.encode_host(store_host)[0])
    except StrataError:
        host = 6       # a bad host is refused by validate(); an IPv4 one meanwhile
    return segment_size - rec.BLANK_MIN_SIZE - rec.record_size(2 * host, 1, 0, 0)


@dataclass
class StoreConfig:
    """Configuration of a store. Unknown or out-of-range values raise InvalidConfigError."""

    segment_size: int = GiB            # data bytes per commit-log segment file
    # largest accepted message body; None (the default): 4 MiB, or less when a segment holds
    # less (body_capacity). A larger value is refused when the config is made.
    max_body_size: int | None = None
    flush: str = "async"               # "async" (page cache, background flush) or "sync" (fsync per put)
    flush_interval_ms: int = 500
    flush_least_pages: int = 4
    flush_thorough_interval_ms: int = 10_000
    sync_flush_timeout_ms: int = 5000
    checkpoint_interval_ms: int = 1000
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    preallocate: bool = True           # prepare the next segment in the background
    prefault: bool = True              # touch its pages ahead of the writer
    verify_crc_on_read: bool = True    # reads check magic, lengths and offset, and the CRC32C
    # puts wait while the dispatch pipeline is this far behind the log (0: never wait)
    max_dispatch_lag_bytes: int = 64 * MiB

    # topics and queues
    default_queues: int = 8
    consume_queue_units: int = 300_000
    # key index
    index_slots: int = 5_000_000
    index_entries: int = 20_000_000
    # retention
    retention_hours: float = 72.0
    delete_when: str = "04"            # hours (";"-separated) when expired files are deleted
    max_files_deleted_per_run: int = 10
    disk_warning_ratio: float = 0.90   # above: refuse puts (DiskFullError) and clean at once
    # above: delete the oldest files regardless of age, only if delete_unexpired_when_full
    disk_clean_forcibly_ratio: float = 0.85
    disk_max_used_ratio: float = 0.75  # above: delete expired files at any hour
    # opt-in data loss (RocketMQ's default): on a full disk, unexpired messages go too
    delete_unexpired_when_full: bool = False
    retention_check_interval_ms: int = 10_000
    # tiered storage (README "Tiered storage"): None, "file:///abs/dir" or "s3://bucket/prefix"
    tier_url: str | None = None
    tier_endpoint_url: str | None = None   # S3-compatible endpoint; None: AWS
    tier_retention_hours: float = 720.0    # how long the tier keeps data, by stored time

    def __post_init__(self) -> None:
        if self.max_body_size is None and isinstance(self.segment_size, int):
            self.max_body_size = min(DEFAULT_MAX_BODY, body_capacity(self.segment_size,
                                                                     self.store_host))
        self.validate()

    def validate(self) -> None:
        def bad(name: str, why: str) -> None:
            raise InvalidConfigError(f"StoreConfig.{name}={getattr(self, name)!r}: {why}")

        for f in fields(self):
            v = getattr(self, f.name)
            if f.type in ("int",) and (not isinstance(v, int) or isinstance(v, bool)):
                bad(f.name, "must be an int")
            if f.type == "float" and not isinstance(v, (int, float)):
                bad(f.name, "must be a number")
            if f.type == "bool" and not isinstance(v, bool):
                bad(f.name, "must be True or False")
        if self.flush not in ("async", "sync"):
            bad("flush", 'must be "async" or "sync"')
        if self.segment_size < 64 * 1024 or self.segment_size % 4096:
            bad("segment_size", "must be a multiple of 4096 and at least 64 KiB")
        if not isinstance(self.max_body_size, int) or isinstance(self.max_body_size, bool):
            bad("max_body_size", "must be an int (or None: 4 MiB, or what a segment holds)")
        if self.max_body_size < 0:
            bad("max_body_size", "must be >= 0")
        for name in ("flush_interval_ms", "flush_thorough_interval_ms", "sync_flush_timeout_ms",
                     "checkpoint_interval_ms", "retention_check_interval_ms"):
            if getattr(self, name) <= 0:
                bad(name, "must be > 0")
        if self.flush_least_pages < 0:
            bad("flush_least_pages", "must be >= 0")
        if self.max_dispatch_lag_bytes < 0:
            bad("max_dispatch_lag_bytes", "must be >= 0 (0: puts never wait for dispatch)")
        if not 1 <= self.default_queues <= 1024:
            bad("default_queues", "must be between 1 and 1024")
        if self.consume_queue_units < 1:
            bad("consume_queue_units", "must be >= 1")
        if self.index_slots < 1:
            bad("index_slots", "must be >= 1")
        if self.index_entries < 2:
            bad("index_entries", "must be >= 2")
        if self.retention_hours <= 0:
            bad("retention_hours", "must be > 0")
        if self.max_files_deleted_per_run < 1:
            bad("max_files_deleted_per_run", "must be >= 1")
        for name in ("disk_warning_ratio", "disk_clean_forcibly_ratio", "disk_max_used_ratio"):
            if not 0 < getattr(self, name) <= 1:
                bad(name, "must be in (0, 1]")
        try:
            hours = [int(h) for h in self.delete_when.split(";") if h.strip()]
        except (ValueError, AttributeError):
            hours = [-1]
        if not hours or any(not 0 <= h <= 23 for h in hours):
            bad("delete_when", 'must be hours 0-23 separated by ";", e.g. "04" or "03;15"')
        if self.tier_url is not None:
            parse_tier_url(self.tier_url, "StoreConfig.tier_url")
        check_endpoint_url(self.tier_endpoint_url, "StoreConfig.tier_endpoint_url")
        if self.tier_retention_hours <= 0:
            bad("tier_retention_hours", "must be > 0")
        h = self.store_host
        if (not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str)
                or not isinstance(h[1], int)):
            bad("store_host", "must be (ip address, port)")
        room = body_capacity(self.segment_size, h)
        if self.max_body_size > room:
            bad("max_body_size", f"no segment of segment_size={self.segment_size} can hold a "
                f"body above {room} bytes (its record's header, hosts, topic and trailer "
                "take the rest); give a larger segment_size or a smaller max_body_size")

    @property
    def delete_hours(self) -> frozenset[int]:
        return frozenset(int(h) for h in self.delete_when.split(";") if h.strip())
