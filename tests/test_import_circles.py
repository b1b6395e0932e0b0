"""No circle of imports between the files of ``src/modforge`` (issue 42: "no circle between files").

The graph is built from the source with :mod:`ast`, nothing is imported. Its nodes are modules (one per
``.py`` file; a package is its ``__init__.py``) and an edge ``a → b`` means file ``a`` imports ``b``
somewhere: at module level, inside a function, a ``try``, an ``if`` — every import statement counts,
since a lazy import is still a dependency. Only imports guarded by ``if TYPE_CHECKING:`` are left out:
they never run, and naming a type from a layer above is how annotations are written.

What an import points at:

* ``import a.b.c`` and ``from a.b.c import name`` (relative imports resolved against the importing
  file's package) point at module ``a.b.c``;
* ``from pkg import name`` where ``pkg.name`` is a module (``from . import x``) points at that module;
* ``from pkg import name`` where ``name`` is a name a package's ``__init__.py`` re-exports
  (``from .registry import Registry`` in it) points at the module that defines ``name``, followed
  through further re-exports and ``import *``; a name ``__init__.py`` defines itself points at it.

So a package's ``__init__.py`` importing its submodules to re-export them is no circle with those
submodules even when they import a re-exported name ``from .`` — the edge goes to where the name is
defined. A submodule that needs something ``__init__.py`` *itself* defines, while ``__init__.py``
imports that submodule, is a circle, and is reported.

A circle is a strongly connected component of more than one file. :data:`KNOWN_CIRCLES` lists the
circles that exist today and are being removed (issue 42); each is reported as a warning while it
exists and as a reminder to drop it from the list once it is gone. Any other circle fails the test,
which names its files and one import line per edge of the circle.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

from source_tree import Import, ModuleTree, write_package

SRC = Path(__file__).resolve().parents[1] / "src"

KNOWN_CIRCLES: tuple[frozenset[str], ...] = ()
"""Circles between files that exist today and are being removed by other work on issue 42 (each a set of
files relative to ``src/``). Empty this list as they go; never add to it."""


def import_graph(root: Path, package: str) -> tuple[ModuleTree, dict[str, dict[str, Import]]]:
    """The file-level import graph of ``package`` under ``root``: module → {imported module → first import}."""
    tree = ModuleTree(root, package)
    graph: dict[str, dict[str, Import]] = {module: {} for module in tree.files}
    for module in tree.files:
        for edge in tree.imports(module):
            if edge.target != module:
                graph[module].setdefault(edge.target, edge)
    return tree, graph


def strongly_connected(graph: dict[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def import_circles(root: Path, package: str) -> list[tuple[frozenset[str], str]]:
    """Every circle of ``package`` under ``root``: (its files relative to ``root``, a description naming
    its files and, for each edge inside it, the import's file and line)."""
    tree, graph = import_graph(root, package)
    circles = []
    for component in strongly_connected({m: list(targets) for m, targets in graph.items()}):
        members = set(component)
        edges = [edge for m in component for target, edge in sorted(graph[m].items()) if target in members]
        lines = [f"  {tree.shown(e.source)}:{e.line} imports {tree.shown(e.target)}" for e in edges]
        files = frozenset(tree.shown(m) for m in component)
        circles.append((files, f"circle between {', '.join(sorted(files))}:\n" + "\n".join(lines)))
    return circles


def test_no_import_circles_between_files() -> None:
    circles = import_circles(SRC, "modforge")
    found = {files for files, _ in circles}
    for files, text in circles:
        if files in KNOWN_CIRCLES:
            warnings.warn(f"known import circle (KNOWN_CIRCLES: being removed): {text}", stacklevel=1)
    for known in KNOWN_CIRCLES:
        if known not in found:
            warnings.warn(f"KNOWN_CIRCLES lists {sorted(known)}, which is no circle any more: drop it", stacklevel=1)
    new = [text for files, text in circles if files not in KNOWN_CIRCLES]
    assert not new, "imports form circles between files (see tests/test_import_circles.py):\n" + "\n".join(new)


# ------------------------------------------------------------------------------------- the checker itself
def test_the_checker_finds_a_circle_through_a_function_level_relative_import(tmp_path: Path) -> None:
    root = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import thing\n",
        "pkg/sub/__init__.py": "",
        "pkg/b.py": "def thing():\n    from .sub import c\n    return c\n",
        "pkg/sub/c.py": "def later():\n    from ..a import thing\n",
        "pkg/d.py": "from . import a\n",
    })  # fmt: skip
    circles = import_circles(root, "pkg")
    assert [files for files, _ in circles] == [frozenset({"pkg/a.py", "pkg/b.py", "pkg/sub/c.py"})]
    text = circles[0][1]
    assert "pkg/b.py:2 imports pkg/sub/c.py" in text and "pkg/sub/c.py:2 imports pkg/a.py" in text


def test_the_checker_finds_a_plain_import_circle_and_ignores_type_checking_imports(tmp_path: Path) -> None:
    root = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/x.py": "import pkg.y\n",
        "pkg/y.py": "import pkg.x as other\n",
        "pkg/t.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .u import U\n",
        "pkg/u.py": "from .t import T\n",
    })  # fmt: skip
    assert [files for files, _ in import_circles(root, "pkg")] == [frozenset({"pkg/x.py", "pkg/y.py"})]


def test_an_init_re_exporting_its_submodules_is_no_circle_but_its_own_names_are(tmp_path: Path) -> None:
    root = write_package(tmp_path, {
        "pkg/__init__.py": "from .parts import Part\nfrom .tools import *\nfrom . import users\n",
        "pkg/parts.py": "class Part: ...\n",
        "pkg/tools.py": "def tool(): ...\n",
        "pkg/users.py": "from . import Part, tool\nfrom pkg import parts\n",
        "own/__init__.py": "from .b import B\nHELPER = 1\n",
        "own/b.py": "from . import HELPER\nclass B: ...\n",
    })  # fmt: skip
    assert import_circles(root, "pkg") == []
    assert [files for files, _ in import_circles(root, "own")] == [frozenset({"own/__init__.py", "own/b.py"})]


def test_known_circles_name_real_files() -> None:
    for known in KNOWN_CIRCLES:
        assert all((SRC / name).is_file() for name in known), known
