"""What `make run` leaves behind stays out of git, and the package metadata builds without
setuptools' deprecation warnings."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout")
@pytest.mark.parametrize("path", ["data/commitlog/00000000000000000000",
                                  "data-parquet/orders/date=2026-11-24/part-0.parquet"])
def test_what_the_demo_writes_is_ignored(path):
    r = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", path])
    assert r.returncode == 0, f"{path} is not in .gitignore"


def test_license_is_an_spdx_string_with_a_setuptools_that_takes_it():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert isinstance(meta["project"]["license"], str)       # a table is deprecated (PEP 639)
    needs = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    m = re.fullmatch(r"setuptools\s*>=\s*(\d+)(\.\d+)*", needs[0])
    assert m is not None and int(m[1]) >= 77, needs           # PEP 639 strings: setuptools 77
