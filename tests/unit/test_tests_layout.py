"""The tests' own tree: pytest imports each test file by its basename with its folder on sys.path (no
__init__.py here), so basenames must be unique, and no folder may be named after a module the tuner
imports: on sys.path, tests/unit/backends/tensorrt/ made `import tensorrt` succeed as an empty namespace
package where TensorRT is not installed."""
import ast
import collections
import os

TESTS = os.path.join(os.path.dirname(__file__), "..")
TUNER = os.path.join(TESTS, "..", "tuner")


def _walk(root):
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        yield dirpath, dirs, files


def test_test_file_basenames_are_unique():
    seen = collections.defaultdict(list)
    for dirpath, _, files in _walk(TESTS):
        if os.path.relpath(dirpath, TESTS).split(os.sep)[0] == "fixtures":
            continue  # distributions a test installs (pip), never imported by basename from here
        for f in files:
            if f.endswith(".py"):
                seen[f].append(os.path.relpath(os.path.join(dirpath, f), TESTS))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_no_test_folder_shadows_a_module_the_tuner_imports():
    imported = {"tuner"}
    for dirpath, _, files in _walk(TUNER):
        for f in files:
            if f.endswith(".py"):
                for node in ast.walk(ast.parse(open(os.path.join(dirpath, f)).read())):
                    if isinstance(node, ast.Import):
                        imported |= {a.name.split(".")[0] for a in node.names}
                    elif isinstance(node, ast.ImportFrom) and not node.level:
                        imported.add(node.module.split(".")[0])
    assert {"tensorrt", "onnxruntime", "openvino"} <= imported  # the walk sees the lazy imports too
    folders = {os.path.relpath(os.path.join(d, s), TESTS) for d, ss, _ in _walk(TESTS) for s in ss}
    assert sorted(f for f in folders if os.path.basename(f) in imported) == []
