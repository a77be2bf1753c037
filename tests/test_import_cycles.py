"""Baton's modules import each other without cycles, at module top, with nothing hidden.

The graph is read from the source with `ast`: every `import bot…` and `from bot… import`
anywhere in a module, at its top, inside functions, and under `if TYPE_CHECKING:`, so
a late import or a type-checking-only import cannot hide a cycle from it.

Packages: a name imported through a package (`from bot.subagents import SubAgentEvent`)
counts as an import of the submodule that defines it (`bot.subagents.runner`), followed
through each `__init__` that re-exports it; a name an `__init__` defines itself, or a
package imported whole, is an edge to the package, and the `__init__`'s own imports are
edges like any module's. What is not counted is Python running a package's `__init__`
before any of its submodules: every submodule of a package whose `__init__` re-exports
it would otherwise sit on a cycle with it, though the `__init__` only re-exports names
(its submodules never read a name from it half-made) and that order is harmless.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BOT = Path(__file__).resolve().parents[1] / "bot"

# The command line imports what each command runs inside that command's function, so
# `baton agents` does not load Slack, the model client and the database driver first
# (about a second). Nothing imports bot.cli, so these late imports hide no cycle, and
# they are checked for cycles all the same (test_no_import_cycles counts them).
LAZY: frozenset[str] = frozenset({"bot.cli"})


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(BOT.rglob("*.py")):
        parts = list(path.relative_to(BOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module a `from … import` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module):
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports(module: str) -> list[tuple[str, str | None, ast.stmt]]:
    """(module imported, name taken from it or None, the statement), for Baton's modules."""
    found: list[tuple[str, str | None, ast.stmt]] = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in MODULES:
                    found.append((f"{source}.{alias.name}", None, node))
                else:
                    found.append((source, alias.name, node))
    return [(target, name, node) for target, name, node in found if target in MODULES]


def _defining(package: str, name: str, seen: frozenset[str] = frozenset()) -> str:
    """The module that defines `name` which `package`'s `__init__` re-exports."""
    for target, imported, node in _imports(package):
        if isinstance(node, ast.ImportFrom) and imported is not None:
            if any((alias.asname or alias.name) == name for alias in node.names):
                if imported == name and _is_package(target) and target not in seen:
                    return _defining(target, name, seen | {package})
                return target
    return package


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for module in MODULES:
        for target, name, _ in _imports(module):
            if name is not None and _is_package(target):
                target = _defining(target, name)
            if target != module:
                graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _late_imports(module: str) -> list[int]:
    """Lines of imports of Baton's modules that are not at the module's top level."""
    top = {id(node) for node in TREES[module].body}
    return sorted(node.lineno for _, _, node in _imports(module) if id(node) not in top)


def _type_checking(module: str) -> list[int]:
    return sorted(
        node.lineno
        for node in ast.walk(TREES[module])
        if (isinstance(node, ast.Name) and node.id == "TYPE_CHECKING")
        or (isinstance(node, ast.Attribute) and node.attr == "TYPE_CHECKING")
        or (isinstance(node, ast.alias) and node.name == "TYPE_CHECKING")
    )


def test_the_graph_sees_the_whole_package() -> None:
    graph = _graph()
    assert "bot.engine.loop" in graph["bot.subagents.runner"]
    # A name taken through a package is an edge to the module that defines it.
    assert "bot.subagents.runner" in graph["bot.sites"]
    assert "bot.subagents" not in graph["bot.sites"]
    assert sum(len(targets) for targets in graph.values()) > 300


def test_hidden_imports_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from bot.engine.loop import Engine\n"
        "def later():\n"
        "    from bot.sites import Site\n"
    )
    monkeypatch.setitem(MODULES, "bot.hiding", MODULES["bot.describe"])
    monkeypatch.setitem(TREES, "bot.hiding", ast.parse(source))
    assert {"bot.engine.loop", "bot.sites"} <= _graph()["bot.hiding"]
    assert _late_imports("bot.hiding") == [3, 5]
    assert _type_checking("bot.hiding") == [1, 2]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_no_late_imports_of_batons_modules() -> None:
    late = {m: lines for m in MODULES if m not in LAZY and (lines := _late_imports(m))}
    assert late == {}


def test_no_type_checking_imports() -> None:
    hidden = {m: lines for m in MODULES if (lines := _type_checking(m))}
    assert hidden == {}


def test_nothing_imports_the_lazy_modules() -> None:
    """A module with late imports is an entry point: only `python -m bot` imports it."""
    importers = {m for m, targets in _graph().items() for t in targets if t in LAZY}
    assert importers == {"bot.__main__"}
