"""One error hierarchy (issue 24): every public ``...Error`` class strata defines, in every
layer (Spark's included), is a ``strata.errors.StrataError``, so ``except StrataError``
catches everything strata raises on purpose and the protocol layers map it by type."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from strata.errors import StrataError

SRC = Path(__file__).resolve().parents[2] / "src" / "strata"


def _error_classes() -> list[tuple[str, str]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        for node in ast.parse(path.read_text("utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error") and \
                    not node.name.startswith("_"):
                found.append((module, node.name))
    return found


def test_every_public_error_class_is_a_strata_error():
    classes = _error_classes()
    assert len(classes) > 20 and ("strata.spark.options", "OptionError") in classes
    outside = [f"{m}.{n}" for m, n in classes
               if not issubclass(getattr(importlib.import_module(m), n), StrataError)]
    assert not outside, f"not under StrataError: {outside}"
