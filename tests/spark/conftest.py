"""A small strata store for the Spark suite to read (helpers in spark_support.py, importable
by that unique name); the session fixture ``spark`` is in tests/support.py (the doc-block test
runs Spark examples in it too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_support import fill_store


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory) -> Path:
    """A store read by many tests (never written to): 3000 orders over several 64 KiB segments,
    700 audit, an empty topic."""
    path = tmp_path_factory.mktemp("spark-read") / "store"
    fill_store(path, {"orders": 3000, "audit": 700})
    return path
