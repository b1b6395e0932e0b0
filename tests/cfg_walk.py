"""The reader's walk of a run's config: from ``experiment/runner.py:train_run``, every function the
config (or a value read from it) is handed to, in the order a reader meets them (issue 42: "the walk
of ``cfg`` from ``train_run`` ≤ 25 stays and ≤ 6 climbs").

Read from the source with :mod:`ast`; nothing is imported or run.

* **Following the config.** In a function, the *config values* are its parameters that received
  one, and the names assigned from them: ``cfg``, ``cfg.data``, ``cfg.data.get("train") or {}``,
  ``dict(settings)``, a loop over one. What a modforge function *returns* is not a config value
  (it is what the function built); a call that is handed one is followed into the function it calls:
  a module's function (``build_splits(cfg)``, ``distributed.join_if_launched(...)``), a class's
  ``__init__``, a method of ``self`` or of a variable whose class is known (a constructor's result,
  an annotation, a function's return annotation: ``task = configured_task(cfg)`` then
  ``task.run(ROUTINES, cfg)`` opens ``Task.run``), or of such a variable's annotated field
  (``exp = Experiment.build(cfg)`` then ``exp.task.run(routines, cfg)``: ``Experiment.task: Task``). A function already read is not read again.
  Calls inside a ``raise`` are not followed, nor is ``cfg.where`` handed on: an error quoting a
  setting, or a key's file and line kept for one, is not where the setting is used.
* **Stays.** The files the reader is in, one after another: every function followed opens its
  file, and coming back to a caller to follow its next call reopens the caller's file. Consecutive
  stays in one file are one stay.
* **Climbs.** The returns of that walk: a caller's file reopened to follow its next call, after a
  callee in another file (a function with nothing more to follow is not returned to).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from source_tree import ModuleTree

__all__ = ["CfgWalk", "walk_config"]

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class CfgWalk:
    """The walk: stays (files, in order), climbs, and the functions read (``module:qualname``)."""

    stays: list[str] = field(default_factory=list)
    climbs: int = 0
    read: list[str] = field(default_factory=list)

    def visits(self, file: str) -> int:
        return sum(1 for stay in self.stays if stay == file)

    def describe(self) -> str:
        return " → ".join(self.stays)


@dataclass(frozen=True)
class Definition:
    """A function (or a class, whose ``__init__`` is read) defined in ``module``."""

    module: str
    node: Function | ast.ClassDef
    owner: ast.ClassDef | None = None

    @property
    def name(self) -> str:
        return f"{self.module}:{self.owner.name + '.' if self.owner else ''}{self.node.name}"


class _Reader:
    def __init__(self, root: Path, package: str):
        self.tree = ModuleTree(root, package)
        self.walk = CfgWalk()
        self.read: set[str] = set()

    # --- names -------------------------------------------------------------------------------------
    def top(self, module: str, name: str) -> Definition | str | None:
        """What ``name`` means at the top of ``module``: a definition, a module (its name), or nothing of ours."""
        for node in self.tree.tree(module).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return Definition(module, node)
        return self.imported(module, self.tree.tree(module).body, name)

    def imported(self, module: str, statements: list[ast.stmt], name: str) -> Definition | str | None:
        for node in statements:
            for inner in ast.walk(node) if isinstance(node, (ast.Import, ast.ImportFrom, ast.If, ast.Try)) else ():
                if isinstance(inner, ast.Import):
                    for alias in inner.names:
                        if alias.asname == name and alias.name in self.tree.files:
                            return alias.name
                elif isinstance(inner, ast.ImportFrom):
                    base = self.tree.base(module, inner)
                    if base is None or base not in self.tree.files:
                        continue
                    for alias in inner.names:
                        if (alias.asname or alias.name) != name:
                            continue
                        target = self.tree.target(base, alias.name)
                        if target == f"{base}.{alias.name}":
                            return target
                        return self.top(target, alias.name) if target != module else None
        return None

    def local_import(self, module: str, function: Function | ast.ClassDef, name: str) -> Definition | str | None:
        imports = [n for n in ast.walk(function) if isinstance(n, (ast.Import, ast.ImportFrom))]
        return self.imported(module, imports, name) if imports else None

    def resolve_name(self, module: str, function: Function | ast.ClassDef, name: str) -> Definition | str | None:
        return self.local_import(module, function, name) or self.top(module, name)

    def method(self, cls: Definition, name: str) -> Definition | None:
        """``name`` as the class ``cls`` (or a modforge base of it) defines it."""
        seen: set[str] = set()
        pending = [cls]
        while pending:
            current = pending.pop(0)
            if current.name in seen or not isinstance(current.node, ast.ClassDef):
                continue
            seen.add(current.name)
            for node in current.node.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    return Definition(current.module, node, current.node)
            for base in current.node.bases:
                found = self.top(current.module, base.id) if isinstance(base, ast.Name) else None
                if isinstance(found, Definition) and isinstance(found.node, ast.ClassDef):
                    pending.append(found)
        return None

    def field_class(self, cls: Definition, name: str) -> Definition | None:
        """The modforge class of the field ``name`` that ``cls`` (a dataclass, say) annotates in its body."""
        if not isinstance(cls.node, ast.ClassDef):
            return None
        for node in cls.node.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return self.class_of(cls.module, cls.node, node.annotation)
        return None

    def class_of(self, module: str, function: Function | ast.ClassDef, annotation: ast.expr | None) -> Definition | None:
        """The modforge class an annotation names (``Task``, ``Task | None``, ``"Task"``)."""
        if annotation is None:
            return None
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(annotation, ast.BinOp):  # X | None
            return self.class_of(module, function, annotation.left) or self.class_of(module, function, annotation.right)
        if isinstance(annotation, ast.Name):
            found = self.resolve_name(module, function, annotation.id)
            if isinstance(found, Definition) and isinstance(found.node, ast.ClassDef):
                return found
        return None

    # --- calls -------------------------------------------------------------------------------------
    def callee(self, where: Definition, types: dict[str, Definition], call: ast.Call) -> Definition | None:
        """The function a call runs, where the source says it (None: not ours, or not known statically)."""
        module, function = where.module, where.node
        func = call.func
        if isinstance(func, ast.Name):
            found = self.resolve_name(module, function, func.id)
            if isinstance(found, Definition) and isinstance(found.node, ast.ClassDef):
                return self.method(found, "__init__")
            return found if isinstance(found, Definition) else None
        if not isinstance(func, ast.Attribute):
            return None
        if isinstance(func.value, ast.Attribute) and isinstance(func.value.value, ast.Name):  # exp.task.run(...)
            holder = types.get(func.value.value.id)
            field = self.field_class(holder, func.value.attr) if holder is not None else None
            return self.method(field, func.attr) if field is not None else None
        if not isinstance(func.value, ast.Name):
            return None
        owner = func.value.id
        if owner in ("self", "cls") and where.owner is not None:
            return self.method(Definition(module, where.owner), func.attr)
        if owner in types:
            return self.method(types[owner], func.attr)
        found = self.resolve_name(module, function, owner)
        if isinstance(found, str):  # a module of ours
            target = self.top(found, func.attr)
            if isinstance(target, Definition) and isinstance(target.node, ast.ClassDef):
                return self.method(target, "__init__")
            return target if isinstance(target, Definition) else None
        if isinstance(found, Definition) and isinstance(found.node, ast.ClassDef):
            return self.method(found, func.attr)
        return None

    def result_class(self, where: Definition, types: dict[str, Definition], value: ast.expr) -> Definition | None:
        """The class of a call's result: a constructor's class, or its function's return annotation."""
        if not isinstance(value, ast.Call):
            return None
        if isinstance(value.func, ast.Name):
            found = self.resolve_name(where.module, where.node, value.func.id)
            if isinstance(found, Definition) and isinstance(found.node, ast.ClassDef):
                return found
        target = self.callee(where, types, value)
        if target is not None and not isinstance(target.node, ast.ClassDef) and target.node.name != "__init__":
            return self.class_of(target.module, target.node, target.node.returns)
        return None


def _ordered(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under ``node`` in source order (a call's arguments before the call: evaluated first)."""
    for child in ast.iter_child_nodes(node):
        yield from _ordered(child)
        yield child


LOCATION_ATTRIBUTES = frozenset({"where"})
"""``cfg.where`` (a key's file and line, for messages) reads no setting: handing it on is not following the config."""


def _mentions(expr: ast.AST, names: set[str]) -> bool:
    """Whether ``expr`` reads one of ``names`` (other than for a key's location)."""
    if isinstance(expr, ast.Attribute) and expr.attr in LOCATION_ATTRIBUTES:
        return False
    if isinstance(expr, ast.Name):
        return expr.id in names
    return any(_mentions(child, names) for child in ast.iter_child_nodes(expr))


def _parameters(function: Function) -> tuple[list[str], str | None, str | None]:
    args = function.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)], \
        args.vararg.arg if args.vararg else None, args.kwarg.arg if args.kwarg else None  # fmt: skip


def _bound(target: Definition, call: ast.Call, carries: set[str], bound_method: bool) -> set[str]:
    """The parameters of ``target`` that receive a config value in ``call``."""
    names, star, double_star = _parameters(target.node)  # type: ignore[arg-type]
    positional = names[1:] if bound_method and names and names[0] in ("self", "cls") else names
    kwonly = {a.arg for a in target.node.args.kwonlyargs}  # type: ignore[union-attr]
    positional = [n for n in positional if n not in kwonly]
    got: set[str] = set()
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            if _mentions(arg, carries) and star:
                got.add(star)
            continue
        if _mentions(arg, carries):
            got.add(positional[i] if i < len(positional) else (star or ""))
    for keyword in call.keywords:
        if not _mentions(keyword.value, carries):
            continue
        if keyword.arg is not None and keyword.arg in names:
            got.add(keyword.arg)
        elif double_star:
            got.add(double_star)
    got.discard("")
    return got


def _walk(reader: _Reader, where: Definition, carries: set[str]) -> None:
    reader.read.add(where.name)
    reader.walk.read.append(where.name)
    file = reader.tree.shown(where.module)
    if not reader.walk.stays or reader.walk.stays[-1] != file:
        reader.walk.stays.append(file)
    carries = set(carries)
    types: dict[str, Definition] = {}
    function = where.node
    assert not isinstance(function, ast.ClassDef)
    for name, annotation in ((a.arg, a.annotation) for a in (*function.args.args, *function.args.kwonlyargs)):
        cls = reader.class_of(where.module, function, annotation)
        if cls is not None:
            types[name] = cls
    raised = {
        id(n)
        for statement in function.body
        for r in ast.walk(statement)
        if isinstance(r, ast.Raise)
        for n in ast.walk(r)
    }  # an error's message quoting a setting is not where the setting is used
    for node in (n for statement in function.body for n in (*_ordered(statement), statement)):
        if id(node) in raised:
            continue
        if isinstance(node, ast.Call) and any(
            _mentions(a, carries) for a in (*node.args, *(k.value for k in node.keywords))
        ):
            target = reader.callee(where, types, node)
            if target is None or target.name in reader.read or isinstance(target.node, ast.ClassDef):
                continue
            if reader.walk.stays[-1] != file:  # back in this function's file to follow its next call
                reader.walk.stays.append(file)
                reader.walk.climbs += 1
            bound = isinstance(node.func, ast.Attribute) or target.node.name == "__init__"
            _walk(reader, target, _bound(target, node, carries, bound))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            cls = reader.result_class(where, types, node.value)
            for target_node in targets:
                if isinstance(target_node, ast.Name) and cls is not None:
                    types[target_node.id] = cls
            if _carries_value(reader, where, types, node.value, carries):
                carries.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.For, ast.AsyncFor)) and _mentions(node.iter, carries):
            carries.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))


def _carries_value(reader: _Reader, where: Definition, types: dict[str, Definition], value: ast.expr,
                   carries: set[str]) -> bool:  # fmt: skip
    """Whether ``value`` is a config value: it reads one, and is not the result of one of our functions."""
    if not _mentions(value, carries):
        return False
    return not (isinstance(value, ast.Call) and reader.callee(where, types, value) is not None)


def walk_config(root: Path, package: str = "modforge", start: tuple[str, str, str] = (
        "modforge.experiment.runner", "train_run", "cfg")) -> CfgWalk:  # fmt: skip
    """The walk from ``start`` (module, function, the config's parameter) in the tree under ``root``."""
    reader = _Reader(root, package)
    module, name, parameter = start
    found = reader.top(module, name)
    assert isinstance(found, Definition), f"{module}:{name} not found"
    _walk(reader, found, {parameter})
    return reader.walk
