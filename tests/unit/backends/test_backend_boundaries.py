"""A backend builds on another only through that backend's public surface (its package's __all__) or on
backends/common/, never on its modules: onnxruntime_gpu takes ONNX Runtime's session engine from
tuner.backends.onnxruntime, whose inside may change."""
import ast
import importlib
import os

import tuner.backends

ROOT = os.path.dirname(tuner.backends.__file__)
PACKAGES = sorted(d for d in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, d, "__init__.py")) and d != "common")


def _imports(package: str):
    """(file, the backend package it names, the submodule path inside it or "", the names) of each import of
    another backend package in `package`'s files."""
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            depth = os.path.relpath(path, ROOT).count(os.sep)  # 1 for a module directly in the package
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    if node.level == depth + 1 and node.module:  # from ..X.Y: relative to backends/
                        parts = node.module.split(".")
                    elif node.level == 0 and (node.module or "").startswith("tuner.backends."):
                        parts = node.module.split(".")[2:]
                    else:
                        continue
                    if parts[0] in PACKAGES and parts[0] != package:
                        yield path, parts[0], ".".join(parts[1:]), [a.name for a in node.names]


def test_backends_use_each_other_only_through_the_public_surface():
    used = []
    for package in PACKAGES:
        for path, other, inner, names in _imports(package):
            assert not inner, f"{path} imports tuner.backends.{other}.{inner}: use the names of tuner.backends.{other}"
            public = importlib.import_module(f"tuner.backends.{other}").__all__
            assert set(names) <= set(public), (path, sorted(set(names) - set(public)))
            used.append((package, other))
    assert ("onnxruntime_gpu", "onnxruntime") in used  # the scan sees the one backend built on another


def test_the_public_surface_loads_each_name():
    package = importlib.import_module("tuner.backends.onnxruntime")
    for name in package.__all__:
        assert getattr(package, name) is not None
