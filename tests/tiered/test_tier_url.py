"""StoreConfig.tier_url / tier_endpoint_url / tier_retention_hours: bad values are a clear
InvalidConfigError naming the problem; good ones parse."""

from __future__ import annotations

import pytest

import strata
from strata.errors import InvalidConfigError
from strata.store.tier_url import TierLocation, parse_tier_url


@pytest.mark.parametrize("url, why", [
    ("ftp://host/dir", "unknown scheme ftp://"),
    ("/abs/dir", r"unknown scheme \(none\)"),
    ("relative/dir", r"unknown scheme \(none\)"),
    ("file://relative/dir", "reads as a host, or the path is relative"),
    ("file:relative", "must be an absolute path"),
    ("file:///", "cannot be the root directory"),
    ("s3://", "missing bucket"),
    ("s3:///prefix", "missing bucket"),
    ("s3://Bad_Bucket/p", "not a valid S3 bucket name"),
    ("s3://bucket/a//b", "empty, '.' or '..' part"),
    ("s3://bucket/a/../b", "empty, '.' or '..' part"),
    ("s3://bucket/p?x=1", "no query"),
    ("", "non-empty str"),
])
def test_bad_tier_url(url, why):
    with pytest.raises(InvalidConfigError, match=why) as exc:
        strata.StoreConfig(tier_url=url)
    assert "StoreConfig.tier_url" in str(exc.value)


def test_bad_endpoint_and_retention():
    with pytest.raises(InvalidConfigError, match="tier_endpoint_url.*http"):
        strata.StoreConfig(tier_url="s3://bucket", tier_endpoint_url="127.0.0.1:9000")
    with pytest.raises(InvalidConfigError, match="tier_retention_hours.*> 0"):
        strata.StoreConfig(tier_retention_hours=0)


def test_good_urls():
    assert parse_tier_url("file:///data/tier/") == TierLocation("file", root="/data/tier")
    assert parse_tier_url("file://localhost/x") == TierLocation("file", root="/x")
    assert parse_tier_url("s3://my-bucket") == TierLocation("s3", bucket="my-bucket")
    loc = parse_tier_url("s3://my.bucket/a/b/")
    assert (loc.bucket, loc.prefix, loc.url) == ("my.bucket", "a/b", "s3://my.bucket/a/b")
    cfg = strata.StoreConfig(tier_url="s3://b-1/p", tier_endpoint_url="http://127.0.0.1:9")
    assert cfg.tier_url == "s3://b-1/p"


def test_bad_url_creates_nothing(tmp_path):
    with pytest.raises(InvalidConfigError):
        strata.open(tmp_path / "s", strata.StoreConfig(tier_url="file://rel"))
    assert not (tmp_path / "s").exists()
