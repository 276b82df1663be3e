"""A bounded read cache for tier objects: fixed-size blocks, least recently used out first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

MiB = 1 << 20


class BlockCache:
    """Caches ``block_size`` pieces of objects, at most ``max_bytes`` in all.

    ``read(path, start, length, fetch)`` answers from cached blocks and fetches the missing
    ones with one ranged read per run of missing blocks (``fetch(path, start, length)``).
    """

    def __init__(self, max_bytes: int = 64 * MiB, block_size: int = MiB) -> None:
        if max_bytes < block_size:
            raise ValueError(f"max_bytes {max_bytes} is smaller than one block ({block_size})")
        self.max_bytes = max_bytes
        self.block_size = block_size
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def _put(self, key: tuple[str, int], data: bytes) -> None:
        with self._lock:
            old = self._blocks.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._blocks[key] = data
            self._bytes += len(data)
            while self._bytes > self.max_bytes:
                _k, gone = self._blocks.popitem(last=False)
                self._bytes -= len(gone)

    def _get(self, key: tuple[str, int]) -> bytes | None:
        with self._lock:
            data = self._blocks.get(key)
            if data is not None:
                self._blocks.move_to_end(key)
            return data

    def read(self, path: str, start: int, length: int,
             fetch: Callable[[str, int, int], bytes]) -> bytes:
        """Bytes ``[start, start + length)`` of ``path`` (fewer at the object's end)."""
        buf, off = self.view(path, start, length, fetch)
        if off == 0 and len(buf) <= length:
            return buf
        return buf[off:off + length]   # copy only the bytes asked for, not the whole block

    def view(self, path: str, start: int, length: int,
             fetch: Callable[[str, int, int], bytes]) -> tuple[bytes, int]:
        """``(buf, off)``: bytes ``[start, start + length)`` of ``path`` are
        ``buf[off:off + length]`` (fewer at the object's end). Within one block ``buf`` is the
        cached block itself, not a copy; across blocks, the blocks joined."""
        if length <= 0:
            return b"", 0
        bs = self.block_size
        first, last = start // bs, (start + length - 1) // bs
        blocks: dict[int, bytes] = {}
        missing: list[int] = []
        for b in range(first, last + 1):
            data = self._get((path, b))
            if data is None:
                missing.append(b)
            else:
                blocks[b] = data
                self.hits += 1
        i = 0
        while i < len(missing):   # one ranged read per run of consecutive missing blocks
            j = i
            while j + 1 < len(missing) and missing[j + 1] == missing[j] + 1:
                j += 1
            raw = fetch(path, missing[i] * bs, (missing[j] - missing[i] + 1) * bs)
            for k, b in enumerate(missing[i:j + 1]):
                piece = raw[k * bs:(k + 1) * bs]
                blocks[b] = piece
                self.misses += 1
                if len(piece) == bs or b == missing[j]:
                    self._put((path, b), piece)
            i = j + 1
        off = start - first * bs
        if first == last:
            return blocks[first], off
        return b"".join([blocks[first][off:], *(blocks[b] for b in range(first + 1, last)),
                         blocks[last][:start + length - last * bs]]), 0

    def cached_view(self, path: str, start: int, length: int) -> tuple[bytes, int] | None:
        """As ``view`` if one cached block holds all of ``[start, start + length)``; else
        None, fetching nothing (a caller that wants a few bytes reads them itself rather
        than a whole block)."""
        bs = self.block_size
        b = start // bs
        if length <= 0 or (start + length - 1) // bs != b:
            return None
        data = self._get((path, b))
        if data is None or len(data) < start + length - b * bs:
            return None
        self.hits += 1
        return data, start - b * bs

    def drop(self, path: str) -> None:
        with self._lock:
            for key in [k for k in self._blocks if k[0] == path]:
                self._bytes -= len(self._blocks.pop(key))
