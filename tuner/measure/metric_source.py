"""A user metric's source, found and checked without running it.

`module:function` names code. A requirement is parsed where the user types it and where a stored study
is read (any worker of a shared database), so parsing runs nothing of the module: its file is found the
way `import` would find it (sys.path, PYTHONPATH), read, and parsed with `ast`; the function must be a
top-level `def` that takes (outputs, refs, inputs). The module is imported only when the metric is first
computed, in the trial's child process (accuracy.load_user_metric). Whether a stored study's metric may
run at all is search.settings.check_metrics's question: this check catches mistakes, it is no sandbox.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import os
import re
from dataclasses import dataclass

from ..errors import UserError

_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
SIGNATURE = "(outputs, refs, inputs) -> float"


@dataclass(frozen=True)
class MetricSource:
    spec: str  # module:function
    module: str
    function: str
    path: str  # the module's .py file

    def sha256(self) -> str:
        return source_hash(self.path)


def source_hash(path: str, length: int | None = None) -> str:
    """The sha256 (hex) of a file a study pins, as it stores it: a metric's source in full, its first `length`
    characters where given (a space file's, 16: search.settings.file_hash)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:length]


def split_spec(spec: str) -> tuple[str, str]:
    """`module:function` -> (module, function); anything else is refused."""
    module, sep, function = spec.partition(":")
    if not sep or not _MODULE.fullmatch(module) or not function.isidentifier():
        raise UserError(f"metric {spec!r}: a user metric is written module:function, e.g. my_metrics:score")
    return module, function


def _find_spec(spec: str, module: str):
    """The module's spec, found as `import` would find it but without executing anything: the top-level
    name through sys.meta_path (finders only, no module code), each submodule through PathFinder in its
    parent's search locations (where find_spec("a.b") would import package a)."""
    parts = module.split(".")
    try:
        found = importlib.util.find_spec(parts[0])
        for i in range(1, len(parts)):
            if found is None or found.submodule_search_locations is None:
                break
            found = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), list(found.submodule_search_locations))
    except (ImportError, ValueError) as exc:
        raise UserError(f"metric {spec!r}: cannot locate module {module!r} ({exc})") from None
    if found is not None and found.name != module:  # a parent that is a module, not a package (os.path)
        raise UserError(f"metric {spec!r}: {found.name} is a module, not a package: no module {module!r} to read")
    if found is None:
        raise UserError(f"metric {spec!r}: no module {module!r} here; is it on PYTHONPATH?")
    return found


def locate_metric(spec: str) -> MetricSource:
    """Find `module:function`'s source and check that `function` is a top-level def callable as
    function(outputs, refs, inputs), importing nothing. One UserError line otherwise."""
    module, function = split_spec(spec)
    found = _find_spec(spec, module)
    if found.origin is None and found.submodule_search_locations is not None:
        raise UserError(f"metric {spec!r}: {module} is a namespace package (a folder without __init__.py), not a module")
    origin = _source_path(found)
    if origin is None:
        raise UserError(f"metric {spec!r}: {module} is a compiled or built-in module ({found.origin}), "
                        "with no Python source to check; write the metric in a .py module")
    try:
        with open(origin, "rb") as f:
            tree = ast.parse(f.read(), origin)
    except (OSError, SyntaxError, ValueError) as exc:
        raise UserError(f"metric {spec!r}: cannot read {origin} ({exc})") from None
    node = _last_binding(tree, function)
    if not isinstance(node, ast.FunctionDef):
        what = ("not defined at its top level" if node is None else
                {ast.AsyncFunctionDef: "an async def", ast.ClassDef: "a class", ast.Import: "imported",
                 ast.ImportFrom: "imported"}.get(type(node), f"bound by {_KIND.get(type(node), 'a statement')}"))
        raise UserError(f"metric {spec!r}: not a function defined in {module}'s source ({origin}: {function} is "
                        f"{what}); a metric is a top-level def {function}{SIGNATURE}")
    problem = _signature_problem(node.args)
    if problem:
        raise UserError(f"metric {spec!r}: {function} at {origin}:{node.lineno} {problem}; a metric is called as "
                        f"{function}{SIGNATURE}")
    return MetricSource(spec, module, function, origin)


def _source_path(found) -> str | None:
    """The .py file a module's spec loads (a frozen standard module: the file it was frozen from); None
    for a built-in, an extension module or bytecode alone."""
    path = getattr(found.loader_state, "filename", None) if found.origin == "frozen" else (
        found.origin if found.has_location else None)
    if not path or not path.endswith(tuple(importlib.machinery.SOURCE_SUFFIXES)) or not os.path.isfile(path):
        return None
    return path


def _last_binding(tree: ast.Module, name: str) -> ast.stmt | None:
    """The module's last top-level statement that binds `name`: what getattr(module, name) would return
    once the module has run (as far as reading it can tell)."""
    last = None
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound = {stmt.name}
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound = {(a.asname or a.name).split(".")[0] for a in stmt.names}
        else:
            bound = _stored_names(stmt)
        if name in bound:
            last = stmt
    return last


_KIND = {ast.Assign: "an assignment", ast.AnnAssign: "an assignment", ast.AugAssign: "an assignment",
         ast.For: "a for loop", ast.With: "a with statement", ast.If: "an if statement", ast.Try: "a try statement"}


def _stored_names(node: ast.AST) -> set[str]:
    """The names a statement binds in its own scope (not inside the functions, classes, lambdas or
    comprehensions it holds)."""
    names, todo = set(), [node]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            names.add(n.name)
            continue
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        if not isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(ast.iter_child_nodes(n))
    return names


def _signature_problem(args: ast.arguments) -> str | None:
    """Why a def with these parameters cannot be called with three positional arguments (None: it can)."""
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    if positional < 3 and args.vararg is None:
        return f"takes {positional} positional parameter{'s' if positional != 1 else ''}, not 3"
    if required > 3:
        return f"requires {required} positional parameters, not 3 (give the others defaults)"
    keyword_only = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if keyword_only:
        return f"requires the keyword-only parameter{'s' if len(keyword_only) > 1 else ''} {', '.join(keyword_only)}"
    return None
