"""Tiered storage (RocketMQ RIP-65): confirmed history is copied per topic-queue to a slower,
cheaper tier — a POSIX directory or an S3 bucket — and can be read back from it alone.

``SUPPORT`` is what an opener hands ``MessageStore`` (``tier=``) so that a store opened with
``StoreConfig.tier_url`` runs a ``TierService`` and reads its tiered history (``strata.open``
passes it for you).
"""

from __future__ import annotations

from strata.store.tier_link import TierSupport
from strata.tiered.service import TierService, history_for_reader

SUPPORT = TierSupport(TierService.for_store, history_for_reader)

__all__ = ["SUPPORT", "TierService"]
