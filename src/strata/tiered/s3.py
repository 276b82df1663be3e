"""The S3 backend (boto3): objects under ``s3://bucket/prefix``.

Large objects go up as multipart uploads (above ``multipart_threshold``, in parts of
``part_size``); reads are ranged GETs; botocore's "standard" retry mode retries throttling,
5xx answers and connection errors/timeouts with exponential backoff (``max_attempts``).
Conditional writes use ``If-None-Match: *`` (create only) and ``If-Match: <ETag>`` (replace
only the version read), so metadata is never overwritten blindly. Credentials come from boto3's
usual chain (environment, profile).
"""

from __future__ import annotations

import io
from typing import Any

from strata.tiered.backend import TierBackend
from strata.tiered.errors import TierConflictError, TierRefusedError, TierUnavailableError
from strata.tiered.posix import check_path

MiB = 1 << 20
_MISSING = {"404", "NoSuchKey", "NotFound"}
# answers that waiting cannot change (TierRefusedError): the keys or their rights are wrong
_REFUSED = {"AccessDenied", "403", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
            "AllAccessDisabled", "AccountProblem", "InvalidToken", "ExpiredToken"}


class S3Backend(TierBackend):
    """Objects in an S3 bucket (or any S3-compatible endpoint) under a key prefix."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 multipart_threshold: int = 16 * MiB, part_size: int = 8 * MiB,
                 max_attempts: int = 5, connect_timeout_s: float = 5.0,
                 read_timeout_s: float = 30.0, client: Any = None) -> None:
        try:
            import boto3
            from boto3.s3.transfer import TransferConfig
            from botocore.config import Config
        except ImportError:  # pragma: no cover - depends on the install
            raise TierUnavailableError(
                "an s3:// tier needs boto3: pip install -e '.[tiered]' in the strata "
                "checkout") from None
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.endpoint_url = endpoint_url
        cfg = Config(retries={"max_attempts": max_attempts, "mode": "standard"},
                     connect_timeout=connect_timeout_s, read_timeout=read_timeout_s)
        self.client = client or boto3.client("s3", endpoint_url=endpoint_url, config=cfg)
        self.transfer = TransferConfig(multipart_threshold=multipart_threshold,
                                       multipart_chunksize=part_size, use_threads=False)

    def _key(self, path: str) -> str:
        check_path(path)
        return f"{self.prefix}/{path}" if self.prefix else path

    def _fail(self, what: str, path: str, exc: Exception) -> Exception:
        from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return TierRefusedError(
                f"tier {self.url}: no S3 credentials ({exc}); set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or give the machine a role")
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                return TierConflictError(
                    f"tier {self.url}: {path} changed since it was read (another store writes "
                    "to this tier?)")
            if code == "NoSuchBucket":
                return TierRefusedError(f"tier {self.url}: no bucket {self.bucket!r} (create "
                                        "it first, or check the name and --endpoint-url)")
            if code in _REFUSED:
                return TierRefusedError(f"tier {self.url}: {what} {path}: {code}: the "
                                        "credentials are refused or lack the right; check "
                                        "them and the bucket's policy")
            return TierUnavailableError(f"tier {self.url}: {what} {path}: {code}: {exc}")
        return TierUnavailableError(f"tier {self.url}: {what} {path}: {exc}")

    @staticmethod
    def _missing(exc: Exception) -> bool:
        from botocore.exceptions import ClientError
        return isinstance(exc, ClientError) and \
            exc.response.get("Error", {}).get("Code", "") in _MISSING

    def put(self, path: str, data) -> None:
        key = self._key(path)
        try:
            if len(data) >= self.transfer.multipart_threshold:
                self.client.upload_fileobj(io.BytesIO(data), self.bucket, key,
                                           Config=self.transfer)
            else:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=bytes(data))
        except Exception as exc:
            raise self._fail("writing", path, exc) from None

    def put_if(self, path: str, data: bytes, expect: str | None) -> str:
        cond = {"IfNoneMatch": "*"} if expect is None else {"IfMatch": expect}
        try:
            r = self.client.put_object(Bucket=self.bucket, Key=self._key(path), Body=data,
                                       **cond)
        except Exception as exc:
            raise self._fail("writing", path, exc) from None
        return r["ETag"]

    def version(self, path: str) -> str | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=self._key(path))["ETag"]
        except Exception as exc:
            if self._missing(exc):
                return None
            raise self._fail("reading", path, exc) from None

    def read(self, path: str, start: int = 0, length: int | None = None) -> bytes:
        if length is not None and length <= 0:
            return b""
        rng = f"bytes={start}-" if length is None else f"bytes={start}-{start + length - 1}"
        try:
            r = self.client.get_object(Bucket=self.bucket, Key=self._key(path), Range=rng)
            return r["Body"].read()
        except Exception as exc:
            if self._missing(exc):
                raise FileNotFoundError(f"tier {self.url}: no object {path}") from None
            code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code", "")
            if code == "InvalidRange":  # a range starting at or past the end
                return b""
            raise self._fail("reading", path, exc) from None

    def size(self, path: str) -> int | None:
        try:
            return self.client.head_object(Bucket=self.bucket,
                                           Key=self._key(path))["ContentLength"]
        except Exception as exc:
            if self._missing(exc):
                return None
            raise self._fail("stat of", path, exc) from None

    def delete(self, path: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(path))
        except Exception as exc:
            raise self._fail("deleting", path, exc) from None

    def _full_prefix(self, prefix: str) -> str:
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def list(self, prefix: str = "") -> list[str]:
        full = self._full_prefix(prefix)
        cut = len(self.prefix) + 1 if self.prefix else 0
        out: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=full):
                out.extend(o["Key"][cut:] for o in page.get("Contents", ()))
        except Exception as exc:
            raise self._fail("listing", prefix or "/", exc) from None
        return sorted(out)

    def clean_partial(self) -> int:
        n = 0
        try:
            for page in self.client.get_paginator("list_multipart_uploads").paginate(
                    Bucket=self.bucket, Prefix=self._full_prefix("")):
                for up in page.get("Uploads", ()):
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=up["Key"],
                                                       UploadId=up["UploadId"])
                    n += 1
        except Exception as exc:
            raise self._fail("cleaning unfinished uploads under", self.prefix or "/", exc) \
                from None
        return n

    def close(self) -> None:
        self.client.close()
