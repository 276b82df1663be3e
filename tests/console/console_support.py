"""Running `strata console` / `strata serve --http` as processes of their own, and Debian's
chromium driven by Playwright (its own browser download is not reachable here)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

SMALL_STORE = ("segment_size=4194304", "index_slots=4096", "index_entries=16384",
               "prefault=false")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def small_config():
    from strata.store.config import StoreConfig
    return StoreConfig(segment_size=4 << 20, index_slots=4096, index_entries=16384,
                       prefault=False)


class Served:
    """A running `strata console` or `strata serve --http` process."""

    def __init__(self, *cmd: str) -> None:
        self.cmd = [sys.executable, "-m", "strata.cli.main", *cmd]
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.url = ""
        self.endpoint = ""    # the gRPC endpoint of `strata serve`

    def start(self) -> "Served":
        self.proc = subprocess.Popen(self.cmd, stderr=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError(f"{self.cmd[3]} exited: {''.join(self.lines)}")
            self.lines.append(line)
            m = re.search(r"(?:console |listening on )http://([\d.]+):(\d+)/", line)
            if m:
                self.url = f"http://{m.group(1)}:{m.group(2)}"
                g = re.search(r"listening on ([\d.]+):(\d+) ", line)
                if g:
                    self.endpoint = f"{g.group(1)}:{g.group(2)}"
                return self
        raise RuntimeError(f"{self.cmd[3]} did not start in 60 s: {''.join(self.lines)}")

    def stop(self, timeout: float = 20) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, rest = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, rest = self.proc.communicate()
        self.lines.append(rest or "")
        return self.proc.returncode

    @property
    def log(self) -> str:
        return "".join(self.lines)

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
