"""The tier's object names and its two small binary layouts (pure; docs/format.md, "Tier").

Per topic-queue, the uploaded history is a run of *chunks*, each three objects named by the
queue offset of its first message (20 digits, so names sort by offset)::

    queues/<topic>/<queue id>/<first offset>.log    the messages' records, back to back, in
                                                    strata's commit-log record format (bytes
                                                    unchanged, CRC included)
    queues/<topic>/<queue id>/<first offset>.cq     one 20-byte consume-queue unit per message:
                                                    (position in the .log object i64, record
                                                    size i32, tag hash i64)
    queues/<topic>/<queue id>/<first offset>.keys   key-index entries (KEY_ENTRY), sorted
    meta/tier.json                                  the metadata store's copy on the tier
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

META_PATH = "meta/tier.json"
QUEUES_DIR = "queues"
KINDS = ("log", "cq", "keys")

# A key-index entry: (hash of "topic#key" u64, store time ms i64, queue offset i64), 24 bytes,
# sorted by hash then queue offset; one per key and one per unique key of each message.
KEY_ENTRY = np.dtype([("hash", "<u8"), ("store_ts", "<i8"), ("offset", "<i8")])
assert KEY_ENTRY.itemsize == 24

_CHUNK = re.compile(r"^queues/(?P<topic>[^/]+)/(?P<queue>\d+)/(?P<first>\d{20})\.(?P<kind>log|cq|keys)$")


def queue_dir(topic: str, queue_id: int) -> str:
    return f"{QUEUES_DIR}/{topic}/{queue_id}/"


def chunk_path(topic: str, queue_id: int, first: int, kind: str) -> str:
    """The object of ``kind`` ("log", "cq" or "keys") of the chunk starting at ``first``."""
    return f"{QUEUES_DIR}/{topic}/{queue_id}/{first:020d}.{kind}"


def parse_chunk_path(path: str) -> tuple[str, int, int, str] | None:
    """(topic, queue id, first offset, kind) of a chunk object's path; None for others."""
    m = _CHUNK.match(path)
    if m is None:
        return None
    return m["topic"], int(m["queue"]), int(m["first"]), m["kind"]


def key_hash(topic: str, key: str) -> int:
    """The 64-bit hash of ``topic#key`` stored in key entries (BLAKE2b, 8-byte digest, read
    as a little-endian u64). Readers compare the real topic and key too: hashes collide. The
    upload computes the same hash compiled (``tiered.blake2b``)."""
    return _from_bytes(_blake2b(f"{topic}#{key}".encode(), digest_size=8).digest(), "little")


_blake2b = hashlib.blake2b
_from_bytes = int.from_bytes


def sort_keys(entries: np.ndarray) -> np.ndarray:
    """Key entries in their stored order: by hash, then queue offset."""
    return entries[np.lexsort((entries["offset"], entries["hash"]))]
