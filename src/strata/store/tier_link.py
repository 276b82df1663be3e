"""What the store knows of its tier: two small interfaces that ``strata.tiered`` (a layer
above) implements and hands in (``TierSupport``, passed to ``MessageStore`` by its opener), so the store's reads can fall back
to the tier and its retention can wait for uploads without importing the tiered layer.

``TierHistory`` answers reads of a store's uploaded history (every record CRC-checked; bytes
that fail their checks raise a ``CorruptStoreError`` naming the tier object, never served).
``TierLink`` is the writer's running tier: start, sync, stop, its history, and how far each
queue is durably uploaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

if TYPE_CHECKING:
    import numpy as np

    from strata.format.record import StoredMessage
    from strata.tiered.reader import TierRead
    from strata.store.message_store import MessageStore


class TierHistory(Protocol):
    """A store's history as its tier holds it."""

    def holds(self, topic: str, queue_id: int) -> bool:
        """Whether the tier holds at least one message of the queue."""

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset the tier holds."""

    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last queue offset the tier holds."""

    def next_held(self, topic: str, queue_id: int, offset: int) -> int:
        """The first offset at or after ``offset`` that the tier holds (max_offset if none)."""

    def earliest_time(self, topic: str, queue_id: int) -> int:
        """Store time (ms) of the oldest message the tier holds of the queue; -1 if none."""

    def get(self, topic: str, queue_id: int, offset: int,
            max_messages: int) -> list["StoredMessage"]:
        """Up to ``max_messages`` messages from ``offset`` (fewer at the tier's end)."""

    def read(self, topic: str, queue_id: int, offset: int, count: int,
             tag_hashes: "np.ndarray | None" = None) -> "TierRead":
        """The messages at offsets [offset, offset + count) as far as the tier holds them
        without a gap (only those of ``tag_hashes``' unit tag hashes, if given): the intact
        ones (``messages``), each damaged one as (queue offset, why) in ``damaged`` (never
        served), and the offset after the last one looked at (``next_offset``)."""

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int,
                        boundary: str) -> int:
        """As ``MessageStore.offset_for_time`` over the tiered range."""

    def query(self, topic: str, key: str, *, begin_ms: int, end_ms: int | None,
              max_results: int, below: int | None = None) -> list["StoredMessage"]:
        """Messages of ``topic`` with ``key`` stored in [begin, end] ms, newest first (only
        from chunks that start below commit-log offset ``below``, if given)."""

    def read_at(self, commitlog_offset: int) -> "StoredMessage | None":
        """The message whose record started at ``commitlog_offset`` in the store's log."""

    def min_commitlog_offset(self) -> int | None:
        """The smallest commit-log offset of a record the tier holds (None: it holds none)."""

    def scan(self, from_offset: int, to_offset: int) -> Iterator["StoredMessage"]:
        """The tier's records whose commit-log offsets lie in [from, to), in log order."""

    def close(self) -> None:
        """Release what it holds (a read-only opener's history is closed with the store)."""


class TierLink(Protocol):
    """A writing store's tier (``MessageStore.tier``)."""

    history: TierHistory

    def start(self) -> None: ...

    def sync(self, timeout_s: float = 60.0) -> None: ...

    def stop(self) -> None: ...

    def uploaded(self, topic: str, queue_id: int) -> int:
        """The first queue offset of the queue not yet durably on the tier (counted by the
        local metadata and by its copy on the tier): local retention may delete below it."""


@dataclass(frozen=True)
class TierSupport:
    """How a store with a ``tier_url`` gets its tier, handed to ``MessageStore`` by its
    opener (``strata.open`` passes ``strata.tiered``'s): ``link(store)`` makes a writer's
    running TierLink, ``history(store)`` a read-only opener's TierHistory (from the tier the
    store remembers, config/tier.json)."""

    link: Callable[["MessageStore"], TierLink]
    history: Callable[["MessageStore"], TierHistory]
