"""Receipt handles: what a consumer gets with each delivered message and gives back to ack it
or to change its invisible time.

A handle names the message (group, topic, queue, queue offset), the delivery it belongs to (a
broker-wide handle id: a redelivery or a ChangeInvisibleDuration issues a new one, and the old
one stops working) and when it expires, and is signed with HMAC-SHA256 under the store's own
secret (``broker/receipt.key``), so a client can neither forge one nor alter one it got.
Pure code: no clock, no files (but ``load_or_create_secret``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

from strata.broker.errors import InvalidReceiptHandleError
from strata.errors import CorruptStoreError
from strata.files.io import FileOps

VERSION = 1
SECRET_BYTES = 32
MAC_BYTES = 16
_FIXED = struct.Struct("<BIqQq")  # version, queue id, queue offset, handle id, deadline ms
_LEN = struct.Struct("<H")


@dataclass(frozen=True)
class Receipt:
    """What a receipt handle says."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    handle_id: int
    deadline_ms: int


class ReceiptSigner:
    """Encodes and checks receipt handles under one secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("a receipt secret has at least 16 bytes")
        self._secret = secret

    def _mac(self, data: bytes) -> bytes:
        return hmac.new(self._secret, data, hashlib.sha256).digest()[:MAC_BYTES]

    def encode(self, r: Receipt) -> str:
        g, t = r.group.encode(), r.topic.encode()
        data = (_FIXED.pack(VERSION, r.queue_id, r.queue_offset, r.handle_id, r.deadline_ms)
                + _LEN.pack(len(g)) + g + _LEN.pack(len(t)) + t)
        return base64.urlsafe_b64encode(data + self._mac(data)).rstrip(b"=").decode("ascii")

    def decode(self, handle: str) -> Receipt:
        """The receipt a handle stands for; InvalidReceiptHandleError unless this broker
        signed it exactly so."""
        try:
            raw = base64.b64decode(handle + "=" * (-len(handle) % 4), altchars=b"-_",
                                   validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise InvalidReceiptHandleError("receipt handle is not valid base64") from None
        if len(raw) < _FIXED.size + 4 + MAC_BYTES:
            raise InvalidReceiptHandleError("receipt handle is too short to be one of this "
                                            "broker's")
        data, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(data)):
            raise InvalidReceiptHandleError("receipt handle was not issued by this broker "
                                            "(its signature does not match)")
        version, queue_id, offset, handle_id, deadline = _FIXED.unpack_from(data)
        if version != VERSION:
            raise InvalidReceiptHandleError(f"receipt handle version {version} is unknown")
        pos = _FIXED.size
        (gl,) = _LEN.unpack_from(data, pos)
        group = data[pos + 2:pos + 2 + gl].decode()
        pos += 2 + gl
        (tl,) = _LEN.unpack_from(data, pos)
        topic = data[pos + 2:pos + 2 + tl].decode()
        return Receipt(group, topic, queue_id, offset, handle_id, deadline)


def load_or_create_secret(path: Path, file_ops: FileOps | None = None) -> bytes:
    """The store's receipt secret, made once (random; written whole or not at all; the
    ``broker/`` directory is made owner-only, the key file readable by its owner only)."""
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        (file_ops or FileOps()).write_atomic(path, secrets.token_bytes(SECRET_BYTES))
        os.chmod(path, 0o600)
        secret = path.read_bytes()
    if len(secret) != SECRET_BYTES:
        raise CorruptStoreError(f"{path}: a receipt secret is {SECRET_BYTES} bytes, this file "
                                f"has {len(secret)}")
    return secret
