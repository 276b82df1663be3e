"""Open the backend a tier URL names."""

from __future__ import annotations

from strata.store.tier_url import TierLocation, parse_tier_url
from strata.tiered.backend import TierBackend


def open_backend(url: str | TierLocation, endpoint_url: str | None = None,
                 **options) -> TierBackend:
    """The backend for ``url`` ("file:///abs/dir" or "s3://bucket/prefix"); ``options`` go to
    the S3 backend (multipart_threshold, part_size, max_attempts, timeouts)."""
    loc = url if isinstance(url, TierLocation) else parse_tier_url(url)
    if loc.scheme == "file":
        from strata.tiered.posix import PosixBackend
        return PosixBackend(loc.root)
    from strata.tiered.s3 import S3Backend
    return S3Backend(loc.bucket, loc.prefix, endpoint_url=endpoint_url, **options)
