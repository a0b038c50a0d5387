"""Optuna's private parts are reached through tuner.store.optuna_private only: no other module imports a private
Optuna name, or reads a private name of Optuna's objects (taken from live ones) on another object. A class may
call its own inherited hooks (`self._...`, `super()._...`): the compat module lists those it overrides."""
import ast
import os

from tuner.store import optuna_private

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tuner")
COMPAT = os.path.abspath(optuna_private.__file__)


def _private_import(node: ast.AST) -> str | None:
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "optuna":
        parts = node.module.split(".") + [a.name for a in node.names]
        if any(p.startswith("_") for p in parts):
            return f"from {node.module} import {', '.join(a.name for a in node.names)}"
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.split(".")[0] == "optuna" and any(p.startswith("_") for p in a.name.split(".")):
                return f"import {a.name}"
    return None


def _is_own(value: ast.AST) -> bool:
    """self.X or super().X: a class's own (inherited) attribute."""
    return (isinstance(value, ast.Name) and value.id in ("self", "cls")) or (
        isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super")


def _optuna_private_names(tmp: str) -> set[str]:
    """Every private name of the Optuna objects engine-tuner holds, read from live ones: a study, its trial,
    a frozen trial, the storages (SQLite, journal file) and their cache, the samplers, a distribution."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    url = f"sqlite:///{os.path.join(tmp, 's.db')}"
    study = optuna.create_study(storage=optuna.storages.get_storage(url))
    trial = study.ask()
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(os.path.join(tmp, "j.log")))
    objects = [study, trial, study.trials[0], study._storage, study._storage._backend, journal, journal._backend,
               FloatDistribution(0, 1), IntDistribution(0, 1), CategoricalDistribution([0])]
    objects += [cls() for cls in (optuna.samplers.TPESampler, optuna.samplers.RandomSampler,
                                  optuna.samplers.NSGAIISampler)]
    objects += [optuna.samplers.GridSampler({"x": [0]}), optuna.storages.RDBStorage]
    names = set()
    for obj in objects:
        names |= {n for n in set(dir(obj)) | set(getattr(obj, "__dict__", {})) if n.startswith("_") and not n.startswith("__")}
    return names


def _private_reads(tree: ast.AST, private: set[str]) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in private and not _is_own(node.value):
            out.append(f"line {node.lineno}: .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in private
              and not _is_own(node.args[0])):
            out.append(f"line {node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in private:
            out.append(f"line {node.lineno}: {node.value!r}")  # a name to reach for by getattr
    return out


def _offences(private: set[str]) -> dict[str, list[str]]:
    found = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            path = os.path.abspath(os.path.join(dirpath, f))
            if not f.endswith(".py") or path == COMPAT:
                continue
            tree = ast.parse(open(path).read())
            bad = [i for i in map(_private_import, ast.walk(tree)) if i] + _private_reads(tree, private)
            if bad:
                found[os.path.relpath(path, ROOT)] = bad
    return found


def test_only_the_compat_module_reaches_optuna_s_private_parts(tmp_path):
    private = _optuna_private_names(str(tmp_path))
    assert {"_storage", "_study_id", "_trial_id", "_cached_frozen_trial", "_backend", "_file_path", "_contains",
            "_get_trials", "_set_trial_attr_without_commit"} <= private  # the scan knows what it looks for
    assert _offences(private) == {}


def test_the_scan_finds_a_private_import_and_a_private_read():
    tree = ast.parse("from optuna.storages._rdb import models\nimport optuna.storages._heartbeat\n"
                     "x = study._storage\ny = getattr(storage, '_backend', storage)\nz = self._storage\n"
                     "w = super()._get_trials()\nv = engine._feed\nfor k in ('_group',): pass\n")
    assert [_private_import(n) for n in tree.body[:2]] == ["from optuna.storages._rdb import models",
                                                           "import optuna.storages._heartbeat"]
    private = {"_storage", "_backend", "_get_trials", "_group"}
    assert sorted(_private_reads(tree, private)) == ["line 3: ._storage", "line 4: '_backend'",
                                                     "line 4: getattr(..., '_backend')", "line 8: '_group'"]


def test_the_compat_module_says_which_optuna_it_was_checked_against():
    import optuna

    assert optuna_private.CHECKED_AGAINST == optuna.__version__  # a new Optuna: read this module again, then move the pin
