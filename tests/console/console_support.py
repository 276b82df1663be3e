"""Running `strata console` / `strata serve --http` as processes of their own, and Debian's
chromium driven by Playwright (its own browser download is not reachable here)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

from support import StrataProcess

SMALL_STORE = ("segment_size=4194304", "index_slots=4096", "index_entries=16384",
               "prefault=false")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def small_config():
    from strata.store.config import StoreConfig
    return StoreConfig(segment_size=4 << 20, index_slots=4096, index_entries=16384,
                       prefault=False)


class Served(StrataProcess):
    """A running `strata console` or `strata serve --http` process."""

    def __init__(self, *cmd: str) -> None:
        super().__init__()
        self.cmd = [sys.executable, "-m", "strata.cli.main", *cmd]
        self.url = ""
        self.endpoint = ""    # the gRPC endpoint of `strata serve`

    def start(self) -> "Served":
        m = self._spawn(self.cmd, r"(?:console |listening on )http://([\d.]+):(\d+)/", 60,
                        self.cmd[3])
        self.url = f"http://{m.group(1)}:{m.group(2)}"
        g = re.search(r"listening on ([\d.]+):(\d+) ", m.string)
        if g:
            self.endpoint = f"{g.group(1)}:{g.group(2)}"
        return self

    def stop(self, timeout: float = 20) -> int:
        return super().stop(signal.SIGTERM, timeout)

    def get(self, path: str) -> tuple[int, dict | str]:
        """GET ``path``: (status, parsed JSON or text)."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                status, body, kind = r.status, r.read(), r.headers.get_content_type()
        except urllib.error.HTTPError as e:
            status, body, kind = e.code, e.read(), e.headers.get_content_type()
        text = body.decode()
        return status, json.loads(text) if kind == "application/json" else text

    def api(self, path: str) -> dict:
        status, got = self.get(path)
        assert status == 200, (status, got)
        return got


def console_cmd(directory: Path, *extra: str) -> Served:
    return Served("console", str(directory), "--http", "127.0.0.1:0", *extra)


def serve_cmd(directory: Path, *extra: str) -> Served:
    opts = [a for o in SMALL_STORE for a in ("--store-option", o)]
    return Served("serve", str(directory), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                  "--exit-with-parent", *opts, *extra)
