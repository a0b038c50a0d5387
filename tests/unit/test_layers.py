"""The package's import graph: packages in layers that import only downward, no circle, no import of a tuner module
hidden in a function, the search never reaching a backend, and ONNX Runtime imported only by its backend and the reference."""
import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tuner")
# The layers, top to bottom: a module imports from its own package and from the rows below its own, never
# from a row above or a neighbour in its row (docs/architecture.md says what each holds). `tuner` is the
# package's __init__ (its version).
LAYERS = (
    ("tuner.cli",),
    ("tuner.api",),
    ("tuner.run",),
    ("tuner.winner", "tuner.analysis"),
    ("tuner.execute", "tuner.report"),
    ("tuner.search",),
    ("tuner.problem",),
    ("tuner.backends",),
    ("tuner.store",),
    ("tuner.inputs", "tuner.measure"),
    ("tuner.errors", "tuner"),
)
# What the search may not reach, directly or through others: what builds or times engines.
BUILDERS = ("tuner.execute", "tuner.winner", "tuner.analysis", "tuner.run", "tuner.problem.reference")
BACKEND_LIBS = ("onnxruntime", "openvino", "nncf", "tensorrt")


def _modules() -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def _imports(name: str, path: str) -> list[tuple[str, bool]]:
    """(imported module, at top level?) for every import statement of the module."""
    tree = ast.parse(open(path).read())
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):  # imports under `if TYPE_CHECKING:` or try at top level count as top level
        if isinstance(node, (ast.If, ast.Try)) and id(node) in top:
            top |= {id(n) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            out.append((mod, id(node) in top))
            out += [(f"{mod}.{a.name}", id(node) in top) for a in node.names]  # `from . import cache`
    return out


MODULES = _modules()
GRAPH = {m: {i for i, _ in _imports(m, p) if i in MODULES and i != m} for m, p in MODULES.items()}


def _closure(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for n in GRAPH[m]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _layer(module: str) -> tuple[int, str]:
    """(row, package) of a module: the longest entry of LAYERS it is or lies under."""
    hits = [(i, p) for i, row in enumerate(LAYERS) for p in row if module == p or module.startswith(p + ".")]
    assert hits, f"{module} is in no layer: place its package in LAYERS and docs/architecture.md"
    return max(hits, key=lambda h: len(h[1]))


def test_every_entry_of_the_package_is_a_layer():
    entries = sorted(f[:-3] if f.endswith(".py") else f for f in os.listdir(ROOT) if not f.startswith(("_", ".")))
    assert entries == sorted(p.split(".", 1)[1] for row in LAYERS for p in row if p != "tuner")
    assert len(os.listdir(ROOT)) - ("__pycache__" in os.listdir(ROOT)) <= 15


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_own_package_and_the_rows_below(module):
    row, package = _layer(module)
    upward = sorted(i for i in GRAPH[module] if _layer(i)[1] != package and _layer(i)[0] <= row)
    assert upward == [], f"{module} (row {row}) imports {[(i, _layer(i)[0]) for i in upward]}"


def test_no_import_circle():
    for m in MODULES:
        assert m not in _closure(m), (f"{m} imports itself through "
                                      f"{sorted(_closure(m) & {x for x in MODULES if m in _closure(x)})}")


def test_tuner_modules_are_imported_at_the_top():
    hidden = [(m, i) for m, p in MODULES.items() for i, top in _imports(m, p) if not top and i.startswith("tuner")]
    assert hidden == [], f"imports of tuner modules inside functions (they hide circles): {hidden}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("tuner.search")))
def test_the_search_reaches_no_builder_and_no_backend(module):
    reach = _closure(module) | {module}
    builders = sorted(m for m in reach if m.startswith(BUILDERS)
                      or (m.startswith("tuner.backends.") and m != "tuner.backends.base"))
    assert builders == [], f"{module} reaches {builders}"
    libs = sorted({i.split(".")[0] for m in reach for i, _ in _imports(m, MODULES[m]) if i.split(".")[0] in BACKEND_LIBS})
    assert libs == [], f"{module} reaches modules importing {libs}"


def test_onnxruntime_is_imported_only_by_its_backend_and_the_reference():
    users = sorted(m for m, p in MODULES.items() for i, _ in _imports(m, p) if i.split(".")[0] == "onnxruntime")
    outside = [m for m in users if not m.startswith("tuner.backends.") and m != "tuner.problem.reference"]
    assert users and outside == [], outside
