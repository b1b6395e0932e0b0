"""Python source read as a tree of modules, with :mod:`ast` (nothing imported): which file a module is,
what an import statement points at, and a small package written to disk for the checkers' own tests.
Shared by the import-circle check (tests/test_import_circles.py) and the config walk (tests/cfg_walk.py)."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Import", "ModuleTree", "runtime_nodes", "top_level_names", "write_package"]


@dataclass(frozen=True)
class Import:
    """One edge of the graph: ``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int


class ModuleTree:
    """The modules of one package tree under ``root``: module name → file, and what each file defines."""

    def __init__(self, root: Path, package: str):
        self.root = root
        self.files: dict[str, Path] = {}
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            self.files[".".join(parts)] = path
        self._trees: dict[str, ast.Module] = {}

    def tree(self, module: str) -> ast.Module:
        if module not in self._trees:
            path = self.files[module]
            self._trees[module] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        return self._trees[module]

    def is_package(self, module: str) -> bool:
        return self.files[module].name == "__init__.py"

    def shown(self, module: str) -> str:
        return self.files[module].relative_to(self.root).as_posix()

    def base(self, module: str, node: ast.ImportFrom) -> str | None:
        """The module a ``from X import ...`` reads from, relative levels resolved."""
        if not node.level:
            return node.module
        package = module if self.is_package(module) else module.rpartition(".")[0]
        parts = package.split(".")
        if node.level - 1 >= len(parts):
            return None
        anchor = ".".join(parts[: len(parts) - (node.level - 1)])
        return f"{anchor}.{node.module}" if node.module else anchor

    def defining(self, package: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """The module that defines ``name`` as ``package`` exports it: followed through the package's
        ``from .x import name`` re-exports and ``import *``; the package itself when it defines it."""
        if package in seen or package not in self.files:
            return package
        seen = seen | {package}
        stars = []
        for node in runtime_nodes(self.tree(package)):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = self.base(package, node)
            if base is None or base not in self.files:
                continue
            for alias in node.names:
                if alias.name == "*":
                    stars.append(base)
                elif (alias.asname or alias.name) == name:
                    return self.target(base, alias.name, seen)
        for base in stars:
            if name in top_level_names(self.tree(base)):
                return self.target(base, name, seen)
        return package

    def target(self, base: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """What ``from base import name`` points at (see the module docstring)."""
        if f"{base}.{name}" in self.files:
            return f"{base}.{name}"
        if self.is_package(base):
            return self.defining(base, name, seen)
        return base

    def imports(self, module: str) -> Iterator[Import]:
        """Every edge out of ``module`` (targets inside this tree only)."""
        for node in runtime_nodes(self.tree(module)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in self.files:
                        yield Import(module, alias.name, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = self.base(module, node)
                if base is None or base not in self.files:
                    continue
                for alias in node.names:
                    target = base if alias.name == "*" else self.target(base, alias.name)
                    yield Import(module, target, node.lineno)


def runtime_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """Every node of ``tree`` except what lies under ``if TYPE_CHECKING:`` (its ``else:`` runs)."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (definitions, assignments, imports) — what ``import *`` may bring."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).partition(".")[0] for a in node.names if a.name != "*")
    return names


def write_package(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path relative to ``root`` → text, dedented) under ``root``; return ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root
