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


def test_the_license_file_is_there_and_shipped():
    """pyproject says Apache-2.0: the text is in LICENSE and goes into the distribution."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text("utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_the_distribution_is_not_named_like_the_registrys_other_strata():
    """The registry's `strata` is an unrelated project: ours is `strata-mq`, while the import
    name and the command stay `strata` (README, top)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    assert meta["name"] == "strata-mq"
    assert meta["scripts"] == {"strata": "strata.cli.main:main"}
    first_screen = (ROOT / "README.md").read_text("utf-8").split("\n## ")[:2]   # title, quick start
    assert "`strata-mq`" in "\n## ".join(first_screen)


def test_the_readme_starts_with_a_two_command_quick_start():
    """The README opens with its quick start: one command runs the main job, one the suite."""
    text = (ROOT / "README.md").read_text("utf-8")
    assert text.split("\n## ")[1].startswith("Quick start")
    block = text.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make run", "make test"]
