"""Only the layers that own segment files look inside them: ``files/`` (the mapped segment),
``log/`` (the commit log's records) and ``format/`` (which defines the header area). Everyone
else goes through their APIs (``CommitLog.read``/``store_time_at``/``decode_at``,
``strata.log.record_area``), never through a segment's map or ``HEADER_AREA`` (issue 15)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "strata"

OWNERS = ("files", "log", "format")
# index/ owns the consume-queue and key-index files and maps them itself
OWN_FILES = {"index/consume_queue.py", "index/key_index.py", "index/key_index_file.py",
             "index/key_index_lookup.py", "index/key_index_repair.py"}
# index/ passes that still read commit-log segment maps directly (left for a later change;
# the list may only shrink)
NOT_YET: set[str] = set()

REACHES_IN = re.compile(r"\bHEADER_AREA\b|\.mm\b|\.mv\b")


def _offenders() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.split("/")[0] in OWNERS or rel in OWN_FILES or rel in NOT_YET:
            continue
        hits = [f"{rel}:{i}: {line.strip()}"
                for i, line in enumerate(path.read_text("utf-8").splitlines(), 1)
                if REACHES_IN.search(line.split("#", 1)[0])]
        if hits:
            found[rel] = hits
    return found


def test_no_module_outside_the_owners_reaches_into_segment_maps():
    found = _offenders()
    assert not found, ("these modules read segment maps or HEADER_AREA directly; use the "
                       "log/ or files/ API instead:\n"
                       + "\n".join(h for hits in found.values() for h in hits))


def test_the_list_of_modules_not_yet_moved_is_not_stale():
    for rel in NOT_YET | OWN_FILES:
        text = (SRC / rel).read_text("utf-8")
        assert REACHES_IN.search(text), f"{rel} no longer reaches in: drop it from the list"
