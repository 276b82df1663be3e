"""Tiered storage (RocketMQ RIP-65): confirmed history is copied per topic-queue to a slower,
cheaper tier — a POSIX directory or an S3 bucket — and can be read back from it alone.

Importing this package attaches it to ``MessageStore``: a store opened with
``StoreConfig.tier_url`` then runs a ``TierService`` (``strata`` imports it for you).
"""

from __future__ import annotations

from strata.store import tier_link
from strata.tiered.service import TierService, history_for_reader

tier_link.register_tier(TierService.for_store, history_for_reader)

__all__ = ["TierService"]
