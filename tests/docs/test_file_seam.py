"""Every write-side file operation goes through the seam in ``strata.files`` (issue 24): a
module outside it that syncs, renames, allocates or locks files by itself escapes the fault
layers of ``strata.testing`` (a crash test could not see or break it) and repeats what
``FileOps`` already does. The source is parsed, so comments and strings do not count."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "strata"
SEAM = "files"

# module.function calls that belong to the seam
FORBIDDEN = {("os", "fsync"), ("os", "fdatasync"), ("os", "rename"), ("os", "replace"),
             ("os", "posix_fallocate"), ("os", "renames"), ("fcntl", "flock"),
             ("fcntl", "lockf"), ("shutil", "move")}
# method names that rename a file (pathlib.Path.rename/.replace) unless called on a FileOps
RENAMING_METHODS = {"rename"}


def _receiver_name(node: ast.expr) -> str:
    """The dotted text of an attribute's receiver (``self.file_ops`` -> "self.file_ops",
    ``file_ops()`` -> "file_ops")."""
    if isinstance(node, ast.Call):
        return _receiver_name(node.func)
    if isinstance(node, ast.Attribute):
        return f"{_receiver_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


def offences(source: str, filename: str = "<src>") -> list[str]:
    """What in ``source`` goes around the seam: ``line: call`` for each offence."""
    tree = ast.parse(source, filename)
    aliases: dict[str, tuple[str, str]] = {}   # from os import fsync [as f]
    modules: dict[str, str] = {}               # import os as o
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in {m for m, _ in FORBIDDEN}:
            for a in node.names:
                if (node.module, a.name) in FORBIDDEN:
                    aliases[a.asname or a.name] = (node.module, a.name)
                    found.append(f"{node.lineno}: from {node.module} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                modules[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            module = modules.get(f.value.id, f.value.id)
            if (module, f.attr) in FORBIDDEN:
                found.append(f"{node.lineno}: {module}.{f.attr}()")
                continue
        if isinstance(f, ast.Attribute) and f.attr in RENAMING_METHODS:
            receiver = _receiver_name(f.value)
            if "ops" not in receiver.rsplit(".", 1)[-1].lower():
                found.append(f"{node.lineno}: {receiver}.{f.attr}()")
        elif isinstance(f, ast.Name) and f.id in aliases:
            found.append(f"{node.lineno}: {f.id}()")
    return found


def _modules_outside_the_seam() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py"))
            if p.relative_to(SRC).parts[0] != SEAM]


def test_no_module_outside_files_syncs_renames_allocates_or_locks_by_itself():
    found = {}
    for path in _modules_outside_the_seam():
        hits = offences(path.read_text("utf-8"), str(path))
        if hits:
            found[path.relative_to(SRC).as_posix()] = hits
    assert not found, ("these modules call the OS around the file seam; use FileOps "
                       "(strata.files.io.file_ops(), fsync_dir) or strata.files.lock:\n"
                       + "\n".join(f"{m}:{h}" for m, hits in found.items() for h in hits))


@pytest.mark.parametrize("source", [
    "import os\nos.fsync(fd)\n",
    "import os\nos.fdatasync(fd)\n",
    "import os\nos.rename(a, b)\n",
    "import os\nos.replace(a, b)\n",
    "import os\nos.posix_fallocate(fd, 0, 1)\n",
    "import os as o\no.fsync(fd)\n",
    "from os import replace as r\nr(a, b)\n",
    "import fcntl\nfcntl.flock(fd, fcntl.LOCK_EX)\n",
    "from pathlib import Path\nPath(a).rename(b)\n",
    "def f(p):\n    p.with_suffix('.x').rename(p)\n",
])
def test_the_check_sees_each_way_around_the_seam(source):
    assert offences(source)


@pytest.mark.parametrize("source", [
    "# os.fsync(fd) in a comment\nx = 'os.replace(a, b)'\n",
    "from strata.files.io import file_ops\nfile_ops().replace(a, b)\nfile_ops().fsync(p, fd)\n",
    "class C:\n    def f(self):\n        self.file_ops.rename(a, b)\n",
    "import dataclasses\ndataclasses.replace(cfg, x=1)\n'a'.replace('b', 'c')\n",
])
def test_the_check_passes_what_goes_through_the_seam(source):
    assert not offences(source)


def test_src_never_imports_the_testing_package():
    """The fault layers reach the code under test only through the seam's hook."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "testing":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{rel}:{node.lineno}" for n in names if n.startswith("strata.testing")]
    assert not found, found
