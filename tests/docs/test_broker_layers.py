"""The broker core (modules directly in ``strata/broker/``) is protocol-neutral: it never
imports a protocol subpackage (only ``process.py``, which runs the listeners, does), and no
protocol subpackage imports another (issue 23)."""

from __future__ import annotations

import ast
from pathlib import Path

BROKER = Path(__file__).resolve().parents[2] / "src" / "strata" / "broker"
# the top of the broker: runs the listeners of every protocol on one store
COMPOSER = "process.py"
PROTOCOLS = ("rocketmq", "kafka")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_the_core_imports_no_protocol():
    bad = [f"{p.name}: {n}" for p in sorted(BROKER.glob("*.py")) if p.name != COMPOSER
           for n in _imports(p) if any(n.startswith(f"strata.broker.{proto}") for proto in PROTOCOLS)]
    assert not bad, "core modules importing a protocol package:\n" + "\n".join(bad)


def test_no_protocol_imports_another():
    bad = []
    for proto in PROTOCOLS:
        for p in sorted((BROKER / proto).glob("*.py")):
            bad += [f"{proto}/{p.name}: {n}" for n in _imports(p) for other in PROTOCOLS
                    if other != proto and n.startswith(f"strata.broker.{other}")]
    assert not bad, "protocol packages importing each other:\n" + "\n".join(bad)
