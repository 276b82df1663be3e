"""The benchmarks' scratch directory: made fresh, removed at the end, never anything else."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable


def scratch_dir(bench: str, directory: str | None) -> tuple[Path, Callable[[], None]]:
    """A new directory for ``bench``'s data, under ``directory`` (created if missing) or
    under /tmp, and the function that removes it (and ``directory`` too when this created it
    and it is empty again)."""
    prefix = f"strata-bench-{bench}-"
    if directory is None:
        scratch = Path(tempfile.mkdtemp(prefix=prefix))
        return scratch, lambda: shutil.rmtree(scratch, ignore_errors=True)
    root = Path(directory)
    root_existed = root.exists()
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=root))

    def cleanup() -> None:
        shutil.rmtree(scratch, ignore_errors=True)
        if not root_existed:
            try:
                root.rmdir()   # only if it is empty again
            except OSError:
                pass

    return scratch, cleanup
