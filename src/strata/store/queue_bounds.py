"""Every queue's min and max offset in one call: what the console's pages and its
once-a-second sampler read over thousands of queues. A writer without a tier answers from
its consume queues in memory (~1.5 µs a queue, a fourth of two ``min_offset`` /
``max_offset`` calls, which check the name and look the queue up each time); a reader,
which follows the writer's files, and a tiered store, whose oldest messages are in the
tier, answer through those calls."""

from __future__ import annotations

from typing import Iterable

QueueBounds = tuple[str, int, int, int]   # (topic, queue id, min offset, max offset)


def queue_counts(store) -> dict[str, int]:
    """Every topic's queue count, as a dict of its own (the caller may keep it)."""
    store._check_open()
    if store.readonly:
        store.topic_table.reload()
    return dict(store.topic_table.queues)


def queue_bounds(store, wanted: Iterable[tuple[str, int]] | None = None) -> list[QueueBounds]:
    """(topic, queue, min offset, max offset) of every queue, sorted by topic and queue, or
    of the ``wanted`` (topic, queue) pairs in their order; a queue that does not exist
    reads (0, 0), as ``min_offset`` and ``max_offset`` answer for it."""
    counts = queue_counts(store)
    if wanted is None:
        wanted = [(t, q) for t in sorted(counts) for q in range(counts[t])]
    if store.readonly or store.config.tier_url is not None:
        return [(t, q, store.min_offset(t, q), store.max_offset(t, q)) for t, q in wanted]
    have = store.queues.queues
    out = []
    for t, q in wanted:
        cq = have.get((t, q)) if 0 <= q < counts.get(t, 0) else None
        out.append((t, q, 0, 0) if cq is None else (t, q, cq.min_offset(), cq.max_offset()))
    return out
