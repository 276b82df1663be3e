"""The store's rooms import each other without a circle (issue 24): a module of
``strata.store`` may import another only if that one does not, directly or through others,
import it back. Imports under ``if TYPE_CHECKING:`` are for annotations and do not count."""

from __future__ import annotations

import ast
from pathlib import Path

STORE = Path(__file__).resolve().parents[2] / "src" / "strata" / "store"


def _runtime_imports(tree: ast.Module) -> set[str]:
    """The strata.store modules ``tree`` imports when it runs (anywhere but under
    ``if TYPE_CHECKING``)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "strata.store":
                found.update(f"strata.store.{a.name}" for a in node.names)
            elif node.module.startswith("strata.store."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("strata.store."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(root: Path = STORE) -> dict[str, set[str]]:
    graph = {}
    for path in sorted(root.glob("*.py")):
        name = f"strata.store.{path.stem}"
        graph[name] = _runtime_imports(ast.parse(path.read_text("utf-8")))
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (as the list of modules around it), or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def walk(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state:
                found = walk(d)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = walk(m)
            if found:
                return found
    return None


def test_no_import_circle_between_store_modules():
    circle = find_circle(import_graph())
    assert circle is None, "import circle inside strata.store: " + " -> ".join(circle)


def test_the_check_finds_a_circle(tmp_path):
    """The check itself: a two-module circle and a TYPE_CHECKING-only one."""
    (tmp_path / "a.py").write_text("from strata.store import b\n")
    (tmp_path / "b.py").write_text("from strata.store.a import x\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\n"
                                   "if TYPE_CHECKING:\n    from strata.store.a import y\n")
    graph = import_graph(tmp_path)
    assert find_circle(graph) == ["strata.store.a", "strata.store.b", "strata.store.a"]
    assert graph["strata.store.c"] == set()
    (tmp_path / "b.py").write_text("x = 1\n")
    assert find_circle(import_graph(tmp_path)) is None


def test_no_module_over_600_lines():
    """One concept per module (issue 24): none in ``src/`` grows past 600 lines."""
    src = STORE.parents[1]
    long = {str(p.relative_to(src)): n for p in src.rglob("*.py")
            if (n := len(p.read_text("utf-8").splitlines())) > 600}
    assert not long, f"modules over 600 lines (split them by concern): {long}"
