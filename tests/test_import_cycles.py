"""No import cycles in the package: imports go one way (server -> engine -> core/models -> dense/moe ->
dispatch), and a cycle held apart only by a function-local import is still a cycle. The leaves every
package imports import only leaves; capacity/, a pure library, imports no engine or model code.

The graph counts every `import` of a moeserve module anywhere in a file (module level and inside
functions), except under `if TYPE_CHECKING:`. `from moeserve.a import b` counts moeserve.a.b when b is
a module, else moeserve.a; like `import moeserve.a.b`, it does not count the packages above the module
it names (a package's __init__ re-exporting its own modules is not a cycle)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "moeserve"

KNOWN_EDGES: set[tuple[str, str]] = set()  # none: a new cycle is broken, not listed here


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:  # a submodule, else a name defined in module `base`
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def import_graph() -> dict[str, set[str]]:
    """moeserve module -> the moeserve modules it imports (itself excluded)."""
    modules = _modules()
    return {name: {m for m in _imported(name, path, modules) if m in modules and m != name} for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle [a, b, ..., a] of `graph`, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    for a, b in KNOWN_EDGES:
        graph[a].discard(b)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Modules any package may import (docs/architecture.md): they import only each other.
LEAVES = {"moeserve." + name for name in (
    "parallel_state", "sampling_params", "outputs", "errors", "envs", "config", "settings", "builtin_model_info",
    "speculative_config", "cli_files")}
# What capacity/ (the planner: pure, no torch) may import besides itself and the leaves.
CAPACITY_MAY_IMPORT = ("moeserve.capacity", "moeserve.placement")


def test_the_leaves_import_only_leaves():
    graph = import_graph()
    wrong = {leaf: sorted(graph[leaf] - LEAVES) for leaf in sorted(LEAVES) if graph[leaf] - LEAVES}
    assert not wrong, f"a leaf imports a module above it (move what both need down into a leaf): {wrong}"


def test_capacity_imports_no_engine_or_model_code():
    graph = import_graph()
    wrong = sorted(f"{module} -> {dep}" for module, deps in graph.items() if module.startswith("moeserve.capacity")
                   for dep in deps if dep not in LEAVES and dep != "moeserve" and not dep.startswith(CAPACITY_MAY_IMPORT))
    assert not wrong, "capacity/ imports engine or model code:\n" + "\n".join(wrong)


def test_the_cycle_finder_finds_cycles_through_function_local_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "moeserve"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from moeserve.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import moeserve.a\n")
    monkeypatch.setitem(globals(), "PACKAGE", pkg)
    graph = import_graph()
    assert graph["moeserve.a"] == {"moeserve.sub.b"} and graph["moeserve.sub.b"] == {"moeserve.c"}
    assert find_cycle(graph) is None  # c -> a only under TYPE_CHECKING
    (pkg / "c.py").write_text("import moeserve.a\n")
    assert find_cycle(import_graph()) == ["moeserve.a", "moeserve.sub.b", "moeserve.c", "moeserve.a"]
