"""``KeyIndex``'s read side: the candidate offsets of a key, walked in compiled code.

``lookup`` answers the common query in one compiled call (``key_index_kernels.find``) over a
table of the files' addresses and geometry, made once per set of files and kept until the
set changes (it holds a numpy view of each map, so a map it points into stays mapped while a
walk may use it). ``candidates`` is the same walk in Python, one candidate at a time with no
bound on how many; ``lookup`` falls back to it when a chain is damaged (it then scans that
file's entries) and when a file was closed under it.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from strata.errors import InvalidInputError, StoreClosedError
from strata.format import key_index as fmt
from strata.format import key_index_kernels as kk
from strata.index.key_index_file import _IndexFile

_ENTRY = fmt.ENTRY
_HASH_MASK = fmt.HASH_MASK
_NOT_MONO = fmt.FLAG_TIMES_NOT_MONOTONE
_SLOTS_AT = fmt.HEADER_BYTES


class KeyIndexLookup:
    """``KeyIndex``'s query methods. They use its state (``_files``, ``_hash``, ``readonly``,
    ``_table``) and helpers (``_open``, ``_rescan``)."""

    _table: tuple | None = None   # (files, table, views) of the last lookup

    def lookup(self, key: str, begin_ms: int, end_ms: int, limit: int = 64
               ) -> tuple[list[int], bool]:
        """The newest ``limit`` (at most) of ``candidates(key, begin_ms, end_ms)``, as a list,
        and whether that is all of them (False: more may follow; ``candidates`` gives them
        all). One compiled walk over every file."""
        self._open()
        if self.readonly:
            self._rescan()
        h = self._key_hash(key)
        got = self._file_table()
        if got is not None:
            table, _views = got         # held until the walk is over: the maps stay mapped
            out = np.empty(limit, np.int64)
            n = kk.find(table, h, begin_ms, end_ms, out, len(table) - 1)
            if n >= 0:
                return out[:n].tolist(), True
            if n == kk.MORE:
                return out.tolist(), False
        # a damaged chain (scan that file) or a map closed meanwhile: the Python walk
        found = []
        for phys in self._walk(list(self._files), h, begin_ms, end_ms):
            if len(found) == limit:
                return found, False
            found.append(phys)
        return found, True

    def _key_hash(self, key: str) -> int:
        try:
            return self._hash(key) & _HASH_MASK
        except UnicodeEncodeError as exc:
            raise InvalidInputError(f"key index key is not encodable as UTF-8: {exc}") from None

    def _file_table(self) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """(rows of ``kk.FILE_*`` per file, oldest first; the views that keep their maps
        mapped) for the current files; None if one of them is closed."""
        files = self._files
        cached = self._table
        if cached is not None and cached[0] == files:
            return cached[1], cached[2]
        snapshot = list(files)
        table = np.zeros((max(1, len(snapshot)), kk.FILE_COLUMNS), np.int64)
        views = []
        for i, f in enumerate(snapshot):
            try:
                v = np.frombuffer(f.mm, np.uint8)
            except ValueError:          # closed: let the Python walk say so
                return None
            views.append(v)
            table[i] = (v.ctypes.data, f.slots, f.entries_pos, f.capacity, f.begin_offset,
                        f.base_ts)
        if not snapshot:
            return table[:0], views
        self._table = (snapshot, table, views)
        return table, views

    def _drop_table(self) -> None:
        """Forget the cached table (before the maps are closed)."""
        self._table = None

    def candidates(self, key: str, begin_ms: int, end_ms: int) -> Iterator[int]:
        """Physical offsets whose entry hash equals ``hash(key)`` and whose second overlaps
        ``[begin_ms, end_ms]``, newest first, without duplicates.

        Raw candidates: a different key with the same hash is included. The caller reads each
        record and keeps it only if its topic, key and exact store time match.
        """
        self._open()
        if self.readonly:
            self._rescan()
        return self._walk(list(self._files), self._key_hash(key), begin_ms, end_ms)

    def _walk(self, files: list[_IndexFile], h: int, begin_ms: int,
              end_ms: int) -> Iterator[int]:
        unpack_entry = _ENTRY.unpack_from
        seen: set[int] = set()
        for f in reversed(files):
            mm = f.mm
            if mm.closed:
                raise StoreClosedError("the key index was closed during a query")
            flags, _end, count, _used, min_d, max_d = fmt.peek_counters(mm)
            if count <= 1:
                continue
            lo, hi = fmt.delta_bounds(begin_ms, end_ms, f.base_ts)
            if max_d < lo or min_d > hi:
                continue
            mono = not flags & _NOT_MONO
            begin = f.begin_offset   # checksummed, unlike the counters (end_offset)
            epos = f.entries_pos
            slots = f.slots
            slot = h % slots
            n = int.from_bytes(mm[_SLOTS_AT + slot * 4:_SLOTS_AT + slot * 4 + 4], "little")
            damaged = n >= f.capacity          # a damaged head; never follow it out of the file
            while n and not damaged:
                eh, phys, d, prev = unpack_entry(mm, epos + n * 20)
                if n < count:                  # entries past the counters are not yet visible
                    if eh % slots != slot:     # a changed link or hash led out of the chain
                        damaged = True
                        break
                    # An entry below the file's offset or time range is damaged (a flipped
                    # bit): its own record is lost to queries, never the entries it links to.
                    if d < lo:
                        if mono and d >= min_d:
                            break
                    elif eh == h and d <= hi and phys >= begin and phys not in seen:
                        seen.add(phys)
                        yield phys
                if prev >= n:                  # links always point backwards
                    damaged = True
                    break
                n = prev
            if damaged:   # the chain cannot be trusted: look at every entry of the file
                yield from self._scan_file(f, count, h, lo, hi, seen)

    @staticmethod
    def _scan_file(f: _IndexFile, count: int, h: int, lo: int, hi: int,
                   seen: set[int]) -> Iterator[int]:
        """``_walk`` without the chains, for a file whose chain of ``h`` is damaged (a flipped
        bit in a slot head or a link): every counted entry of hash ``h`` whose time second is
        in ``[lo, hi]``, newest first."""
        ents = np.frombuffer(f.mm, fmt.ENTRY_DTYPE, count, f.entries_pos)[1:]
        d = ents["delta"]
        rows = np.flatnonzero((ents["hash"] == h) & (d >= lo) & (d <= hi))
        found = ents["offset"][rows[::-1]].tolist()
        del ents, d
        for phys in found:
            if phys not in seen:
                seen.add(phys)
                yield phys

