"""Key-index recovery at a writer's open: chain checks, torn-entry cuts, truncation, repairs,
and the set-aside / re-dispatch decisions (a mixin of ``KeyIndex``)."""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from strata.errors import CorruptStoreError
from strata.files.io import file_ops
from strata.format import key_index as fmt
from strata.format.derived import IndexFileEnd
from strata.index.key_index_file import SPARE_NAME, _TMP_SUFFIX, _IndexFile

log = logging.getLogger("strata.index.key_index")   # the key index's logger, as before the split

_NOT_MONO = fmt.FLAG_TIMES_NOT_MONOTONE
_SEALED = fmt.FLAG_SEALED
DAMAGED_SUFFIX = ".damaged"   # a file set aside by a writer's open (kept for inspection)


def _zero(mm: mmap.mmap, start: int, stop: int) -> None:
    """Zero bytes [start, stop) of a map in bounded chunks."""
    chunk = bytes(min(max(stop - start, 0), 1 << 22))
    while start < stop:
        n = min(len(chunk), stop - start)
        mm[start:start + n] = chunk[:n] if n < len(chunk) else chunk
        start += n


NEWEST_SCAN_CHUNK = 1 << 16   # entries looked at per step of _newest_in_slots


def _newest_in_slots(ents: np.ndarray, count: int, slots: int, wanted: np.ndarray) -> np.ndarray:
    """For each slot in ``wanted`` (sorted, unique), the number of the newest entry among
    ``ents[1:count]`` whose hash falls in it (0: none): the chain head a slot must get back
    when the link that would tell it cannot be trusted. Scans back from the newest entry a
    chunk at a time and stops once every wanted slot is found."""
    out = np.zeros(len(wanted), np.int64)
    missing = np.ones(len(wanted), bool)
    hi = count
    while hi > 1 and missing.any():
        lo = max(1, hi - NEWEST_SCAN_CHUNK)
        slot_of = ents["hash"][lo:hi].astype(np.int64) % slots
        rows = np.flatnonzero(np.isin(slot_of, wanted[missing]))[::-1]   # newest first
        found, at = np.unique(slot_of[rows], return_index=True)   # each slot's newest
        k = np.searchsorted(wanted, found)
        out[k] = lo + rows[at]
        missing[k] = False
        hi = lo
    return out


def _chain_problem(f: _IndexFile) -> str | None:
    """What is wrong with a file's counted entries and slot heads (None: nothing found)."""
    count = f.count
    if count < 1 or count > f.capacity:
        return f"its entry count {count} is outside 1..{f.capacity}"
    ents = f.entries_view(count)[1:]
    heads = f.slots_view()
    try:
        if not len(ents):
            return "a slot head points into an empty file" if heads.any() else None
        offsets = ents["offset"]
        prev = ents["prev"].astype(np.int64)
        slot_of = ents["hash"].astype(np.int64) % f.slots
        numbers = np.arange(1, count, dtype=np.int64)
        bad = (offsets < f.begin_offset) | (offsets > int(offsets[-1])) | (prev < 0) \
            | (prev >= numbers)
        bad[1:] |= offsets[1:] < offsets[:-1]
        linked = np.flatnonzero(~bad & (prev > 0))
        bad[linked] |= slot_of[prev[linked] - 1] != slot_of[linked]
        hits = np.flatnonzero(bad)
        if len(hits):
            return f"entry {int(hits[0]) + 1} is damaged or breaks its chain"
        used = np.flatnonzero(heads)
        h = heads[used].astype(np.int64)
        if (h >= count).any():
            return "a slot head points past the counted entries"
        if (slot_of[h - 1] != used).any():
            return "a slot head points to an entry of another slot"
        return None
    finally:
        del ents, heads


@dataclass(frozen=True)
class _Repair:
    """What opening found wrong with an unsealed file and fixed (kept for tests and logs)."""

    name: str
    entries_before: int
    entries_after: int


class KeyIndexRepair:
    """``KeyIndex``'s recovery methods. They use its state (``directory``, ``_files``, ``_lock``,
    ``repairs``, ``set_aside``, ``damaged_from``) and helpers (``_map``, ``_listing``,
    ``_delete``, ``_end_locked``, ``_writable``)."""

    # ------------------------------------------------------------------ opening

    def _open_for_writing(self) -> None:
        for e in os.scandir(self.directory):
            if e.name.endswith(_TMP_SUFFIX) and fmt.parse_file_name(e.name[:-4]) is not None:
                os.unlink(e.path)        # a creation interrupted before its rename
            elif e.name == SPARE_NAME:
                self._spare = Path(e.path)   # reserved by an earlier writer: still good
        listing = self._listing()
        for i, (order, name, _ino) in enumerate(listing):
            try:
                self._files.append(self._map(self.directory / name, order))
            except CorruptStoreError as exc:
                self._set_aside([n for _o, n, _i in listing[i:]], str(exc))
                self._lost_from(order[0])
                break
        # A file whose first batch never reached its header holds nothing: drop it.
        while self._files and self._files[-1].count == 1:
            self._delete(self._files.pop())
        for i, f in enumerate(self._files):
            if f.flags & _SEALED or not self._check_and_repair(f):
                continue
            # Entries were lost (power loss before a flush): later files would leave a hole that
            # replay from indexed_end() cannot fill, so they go, and so does an emptied file.
            keep = i + 1 if f.count > 1 else i
            self._lost_from(int(f.entries_view()[f.count - 1]["offset"]) if f.count > 1
                            else f.begin_offset)
            for later in self._files[keep:]:
                self._delete(later)
            del self._files[keep:]
            break

    def _set_aside(self, names: list[str], problem: str) -> None:
        """Rename unusable files (the first of ``names`` is damaged: ``problem``; the rest
        follow it) to ``<name>.damaged``: the index is derived from the commit log, so they
        never keep a store from opening; the caller re-dispatches their entries."""
        for n, name in enumerate(names):
            path = self.directory / name
            file_ops().replace(path, path.with_name(name + DAMAGED_SUFFIX))
            self.set_aside.append(f"{path}: {problem if n == 0 else 'follows a damaged file'}")
        file_ops().fsync_dir(self.directory)
        log.warning("key index: set aside %s; its entries are re-dispatched from the commit "
                    "log", "; ".join(self.set_aside))

    def _lost_from(self, offset: int) -> None:
        if self.damaged_from is None or offset < self.damaged_from:
            self.damaged_from = offset

    def _check_and_repair(self, f: _IndexFile) -> bool:
        """Make an unsealed file consistent after a crash.

        A batch writes entries, then slot heads, then the header counters. A crash in between
        leaves slot heads pointing at entries the header does not count; a power loss can also
        leave counted entries unwritten, and a flipped bit can change one entry. Entries are
        checked (offsets within the file's range and non-decreasing, links pointing
        backwards); the file is cut before the first bad one — an entry above both neighbours
        is bad itself, not the one after it — and its slots are rebuilt from the entries that
        remain. The caller replays the log from the last kept entry's offset
        (``damaged_from``), which writes the cut entries again: a damaged entry never hides
        the entries after it.
        """
        ents = f.entries_view()[1:]
        n = len(ents)
        good = n
        if n:
            offsets = ents["offset"]
            prev = ents["prev"]
            numbers = np.arange(1, n + 1, dtype=np.int64)
            bad = ((prev < 0) | (prev >= numbers) | (offsets < f.begin_offset)
                   | (offsets > f.end_offset))
            descending = offsets[1:] < offsets[:-1]
            bad[1:] |= descending
            # an entry above its successor that its predecessor is not above: a flipped high
            # bit, not a torn tail (which reads as zeros after good entries)
            bad[:-1] |= descending & np.concatenate(([True], offsets[:-2] <= offsets[2:]))
            hits = np.flatnonzero(bad)
            if hits.size:
                good = int(hits[0])
        heads = f.slots_view()
        if (good == n and n and ents["offset"][-1] == f.end_offset
                and int(heads.max(initial=0)) < f.count
                and int(np.count_nonzero(heads)) == f.used):
            return False
        if good == n and n == 0 and not heads.any():
            return False
        before = f.count - 1
        high = min(max(f.count, int(heads.max(initial=0)) + 1), f.capacity)
        self._rebuild(f, good + 1, high)
        self.repairs.append(_Repair(f.name, before, good))
        return good < before

    def _rebuild(self, f: _IndexFile, count: int, high: int) -> None:
        """Keep entries [1, count): rebuild slots and counters from them, zero the rest."""
        heads = f.slots_view()
        ents = f.entries_view(max(high, count))
        kept = ents[1:count]
        heads_new = np.zeros(f.slots, dtype="<u4")
        if len(kept):
            slot_of = kept["hash"].astype(np.int64) % f.slots
            uniq, first_from_end = np.unique(slot_of[::-1], return_index=True)
            heads_new[uniq] = (len(kept) - first_from_end).astype("<u4")
        heads[:] = heads_new
        _zero(f.mm, f.entries_pos + count * fmt.ENTRY_BYTES,
              f.entries_pos + max(high, count) * fmt.ENTRY_BYTES)
        self._recount(f, count, int(np.count_nonzero(heads_new)))

    def _recount(self, f: _IndexFile, count: int, used: int) -> None:
        """Set a file's counters to describe entries [1, count) and write them."""
        kept = f.entries_view(count)[1:]
        f.count = count
        f.used = used
        if len(kept):
            d = kept["delta"]
            f.end_offset = int(kept["offset"][-1])
            f.min_d, f.max_d, f.last_d = int(d.min()), int(d.max()), int(d[-1])
            f.flags = _NOT_MONO if len(d) > 1 and bool((d[1:] < d[:-1]).any()) else 0
        else:
            f.end_offset, f.min_d, f.max_d, f.last_d, f.flags = -1, 0, 0, 0, 0
        f.store_counters()
        f.dirty = True

    # ------------------------------------------------------------------ checks at open

    def check_expected(self, files: Sequence[IndexFileEnd], index_end: int, log_min: int,
                       log_end: int) -> list[str]:
        """Writer's open: compare the files with what the last checkpoint recorded
        (``files``: IndexFileEnd, ``index_end``). A file that still covers records of the log
        but is gone makes every later file go too (set aside) and the index is re-dispatched
        from its first offset; an index that ends before the recorded end is re-dispatched from
        where it ends. Returns what was found (empty: nothing)."""
        self._writable()
        found = []
        with self._lock:
            have = {f.order for f in self._files}
            gone = [e for e in files if (e.begin_offset, e.sequence) not in have
                    and e.end_offset >= log_min and e.begin_offset < log_end]
            if gone:
                first = min(gone, key=lambda e: (e.begin_offset, e.sequence))
                name = fmt.file_name(first.begin_offset, first.sequence)
                later = [f for f in self._files if f.order > (first.begin_offset, first.sequence)]
                self._drop_table()   # its views would keep the maps mapped
                for f in later:
                    self._files.remove(f)
                    try:
                        f.mm.close()
                    except BufferError:
                        pass
                if later:
                    self._set_aside([f.name for f in later], f"follows missing file {name}")
                self._lost_from(max(first.begin_offset, log_min))
                found.append(f"key index file(s) missing: "
                             f"{', '.join(fmt.file_name(e.begin_offset, e.sequence) for e in gone)}"
                             f"{f' ({len(later)} later file(s) set aside)' if later else ''}")
            end = self._end_locked()
            if not found and end < index_end <= log_end:
                self._lost_from(max(end, log_min))
                found.append(f"key index ends at offset {end}, the checkpoint recorded "
                             f"{index_end}")
        for line in found:
            log.warning("key index %s: %s; rebuilt from the commit log", self.directory, line)
        return found

    def check_chains(self, log_min: int) -> list[str]:
        """Writer's open: check every file's entries and chains in one numpy pass each (no
        commit-log read): offsets within the file's range and never decreasing, every link
        pointing backwards to an entry of the same slot, every slot head to a counted entry of
        its slot. A sealed file is otherwise trusted as it is, so a zeroed stretch or a broken
        chain there would hide keys from ``query``: the first file found broken is set aside
        with every later one, and the log is re-dispatched into the index from its first
        offset. Returns what was found (empty: nothing)."""
        self._writable()
        with self._lock:
            for i, f in enumerate(self._files):
                why = _chain_problem(f)
                if why is None:
                    continue
                later = self._files[i:]
                del self._files[i:]
                self._drop_table()
                for g in later:
                    try:
                        g.mm.close()
                    except BufferError:
                        pass
                self._set_aside([g.name for g in later], why)
                self._lost_from(max(f.begin_offset, log_min))
                line = (f"key index file {f.name}: {why}"
                        f"{f' ({len(later) - 1} later file(s) set aside too)' if len(later) > 1 else ''}")
                log.warning("key index %s: %s; rebuilt from the commit log", self.directory, line)
                return [line]
        return []

    # ------------------------------------------------------------------ recovery

    def truncate(self, physical_offset: int) -> None:
        """Forget every entry at ``physical_offset`` or beyond (recovery after the log was cut).

        Undoing entries newest first (slot := entry.prev) restores exactly the state the index
        had before they were added; files that begin at or beyond the offset are deleted.
        """
        self._writable()
        with self._lock:
            self._truncate_locked(physical_offset)

    def _truncate_locked(self, physical_offset: int) -> None:
        while self._files and self._files[-1].begin_offset >= physical_offset:
            self._delete(self._files.pop())
        if not self._files:
            return
        f = self._files[-1]
        ents = f.entries_view()
        offsets = ents["offset"][1:]
        cut = 1 + int(np.searchsorted(offsets, physical_offset, side="left"))
        if cut >= f.count:
            return
        removed = ents[cut:f.count]
        slot_of = removed["hash"].astype(np.int64) % f.slots
        uniq, first = np.unique(slot_of, return_index=True)
        restored = removed["prev"][first].astype(np.int64)
        # The entries cut are the newest, those a power loss may have torn: a link that is 0
        # or does not lead to an older entry of the same slot is not trusted, the slot's newest
        # kept entry is looked up instead (a torn link must never orphan the chain behind it).
        ok = (restored > 0) & (restored < cut)
        ok[ok] = ents["hash"][restored[ok]].astype(np.int64) % f.slots == uniq[ok]
        if not ok.all():
            restored[~ok] = _newest_in_slots(ents, cut, f.slots, uniq[~ok])
        heads = f.slots_view()
        heads[uniq] = restored.astype("<u4")
        used = f.used - int(np.count_nonzero(restored == 0))
        _zero(f.mm, f.entries_pos + cut * fmt.ENTRY_BYTES,
              f.entries_pos + f.count * fmt.ENTRY_BYTES)
        del ents, offsets, removed
        self._recount(f, cut, used)
