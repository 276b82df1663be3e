"""Counted nouns in what strata prints for people: "1 file", "2 files", "1,024 batches".

One helper, so every command and log line gets the plural right the same way."""

from __future__ import annotations

_IRREGULAR = {"batch": "batches", "index": "indexes", "entry": "entries", "was": "were"}


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` (with thousands separators) and ``noun``, plural unless ``n`` is 1."""
    if n == 1:
        return f"1 {noun}"
    many = plural or _IRREGULAR.get(noun) or (noun[:-1] + "ies" if noun.endswith("y") and
                                              noun[-2:-1] not in "aeiou" else noun + "s")
    return f"{n:,} {many}"
