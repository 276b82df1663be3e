"""Where a store's tier lives: ``StoreConfig.tier_url`` parsed and checked (pure, no I/O).

``file:///abs/dir`` names a POSIX directory; ``s3://bucket/prefix`` an S3 bucket and a key
prefix (the endpoint comes from ``StoreConfig.tier_endpoint_url``, credentials from boto3's
usual chain). Anything else is an InvalidConfigError that names what is wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from strata.errors import InvalidConfigError

SCHEMES = ("file", "s3")
# S3's bucket naming rules (3-63 characters, lower-case letters, digits, dots and hyphens,
# starting and ending with a letter or digit)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class TierLocation:
    """A parsed tier URL: ``scheme`` "file" (``root`` is an absolute directory) or "s3"
    (``bucket`` and ``prefix``, the prefix without leading or trailing slashes)."""

    scheme: str
    root: str = ""
    bucket: str = ""
    prefix: str = ""

    @property
    def url(self) -> str:
        if self.scheme == "file":
            return f"file://{self.root}"
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_tier_url(url: str, what: str = "tier_url") -> TierLocation:
    """Parse and check a tier URL; InvalidConfigError naming the problem if it is bad."""
    def bad(why: str) -> InvalidConfigError:
        return InvalidConfigError(f"{what}={url!r}: {why}")

    if not isinstance(url, str) or not url:
        raise bad('must be a non-empty str such as "file:///abs/dir" or "s3://bucket/prefix"')
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise bad(f"unknown scheme {parts.scheme + '://' if parts.scheme else '(none)'}; "
                  'use "file:///abs/dir" or "s3://bucket/prefix"')
    if parts.query or parts.fragment:
        raise bad("a tier URL takes no query (?...) or fragment (#...)")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise bad(f"a file URL names a local absolute directory (file:///abs/dir); "
                      f"{parts.netloc!r} reads as a host, or the path is relative")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise bad("the directory must be an absolute path (file:///abs/dir)")
        root = path.rstrip("/") or "/"
        if root == "/":
            raise bad("the tier cannot be the root directory /")
        return TierLocation("file", root=root)
    bucket = parts.netloc
    if not bucket:
        raise bad("missing bucket (s3://bucket/prefix)")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise bad(f"{bucket!r} is not a valid S3 bucket name (3-63 characters of a-z, 0-9, "
                  "'.' and '-', starting and ending with a letter or digit)")
    prefix = unquote(parts.path).strip("/")
    if "//" in prefix or any(p in (".", "..") for p in prefix.split("/") if prefix):
        raise bad("the key prefix has an empty, '.' or '..' part")
    return TierLocation("s3", bucket=bucket, prefix=prefix)


def check_endpoint_url(url: str | None, what: str = "tier_endpoint_url") -> None:
    """An S3 endpoint is None (AWS) or an http(s) URL with a host."""
    if url is None:
        return
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidConfigError(f"{what}={url!r}: must be an http:// or https:// URL with a "
                                 "host (e.g. http://127.0.0.1:9000), or None for AWS")
