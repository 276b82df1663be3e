"""Every relative link in README.md and docs/ leads to a file that exists (a moved or never
written page is found here, not by a reader)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted((ROOT / "bench").glob("*.md"))]


def _relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text("utf-8"), flags=re.S)   # code is not a link
    return [t for t in LINK.findall(text)
            if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_pages_have_links_to_check():
    assert sum(len(_relative_links(p)) for p in _pages()) >= 10


def test_every_relative_link_resolves():
    broken = [f"{page.relative_to(ROOT)}: {target}"
              for page in _pages() for target in _relative_links(page)
              if not (page.parent / target.split("#", 1)[0]).exists()]
    assert broken == []
