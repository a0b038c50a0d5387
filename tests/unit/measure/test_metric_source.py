"""A user metric named in a requirement (tuner.measure.metric_source): its source is found and read, its
function checked for the signature (outputs, refs, inputs), and nothing of it runs until it is computed."""
import importlib
import importlib.machinery
import sys
import uuid

import numpy as np
import pytest

from tuner.errors import UserError
from tuner.measure.accuracy import load_user_metric
from tuner.measure.metric_source import locate_metric, source_hash
from tuner.measure.requirement import Requirement

GOOD = """\
import numpy as np
open({marker!r}, "w").close()  # importing this module leaves a mark


def score(outputs, refs, inputs, scale=1.0):
    return scale * float(max(np.max(np.abs(o["y"] - r["y"])) for o, r in zip(outputs, refs)))
"""


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Write modules into a folder on sys.path: write(name, source) -> the module's name (unique per test)."""
    tag = uuid.uuid4().hex[:8]
    made = []

    def write(name, source, path=None):
        full = f"{name}_{tag}"
        target = tmp_path / (path.format(full) if path else f"{full}.py")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source) if isinstance(source, str) else target.write_bytes(source)
        importlib.invalidate_caches()
        made.append(full)
        return full

    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    for name in list(sys.modules):
        if name.split(".")[0] in made:
            del sys.modules[name]


def test_a_good_metric_is_checked_without_importing_it_and_runs_when_computed(modules, tmp_path):
    marker = tmp_path / "imported"
    name = modules("good", GOOD.format(marker=str(marker)))
    req = Requirement.parse(f"cos<=0.01,{name}:score<=0.5")
    assert req.user_metrics() == [f"{name}:score"]
    assert not marker.exists() and name not in sys.modules  # parsing read the file; it ran nothing of it
    source = locate_metric(f"{name}:score")
    assert (source.spec, source.module, source.function) == (f"{name}:score", name, "score")
    assert source.path == str(tmp_path / f"{name}.py") and source.sha256() == source_hash(source.path)
    assert len(source.sha256()) == 64
    fn = load_user_metric(f"{name}:score")  # what the trial's child does when it computes the metric
    assert marker.exists()
    y = {"y": np.zeros(3)}
    assert fn([y], [{"y": np.ones(3)}], [{}]) == 1.0


def test_a_metric_in_a_package_is_read_without_running_the_package(modules, tmp_path):
    marker = tmp_path / "package-ran"
    pkg = modules("pkg", f"open({str(marker)!r}, 'w').close()\n", path="{}/__init__.py")
    (tmp_path / pkg / "metrics.py").write_text("def score(outputs, refs, inputs):\n    return 0.0\n")
    importlib.invalidate_caches()
    assert locate_metric(f"{pkg}.metrics:score").path == str(tmp_path / pkg / "metrics.py")
    assert not marker.exists() and pkg not in sys.modules  # find_spec("pkg.metrics") would have imported pkg


@pytest.mark.parametrize("source", [
    "def score(outputs, refs, inputs):\n    return 0.0\n",
    "def score(a, b, c, d=1, *rest, k=2, **kw):\n    return 0.0\n",
    "def score(*args):\n    return 0.0\n",
    "def score(a, /, b, c):\n    return 0.0\n",
    "import functools\n\n@functools.lru_cache\ndef helper():\n    pass\n\nscore = 1\n\ndef score(a, b, c):\n    return 0.0\n",
])
def test_signatures_callable_with_three_positional_arguments_are_accepted(modules, source):
    name = modules("ok", source)
    assert locate_metric(f"{name}:score").function == "score"


@pytest.mark.parametrize("source, message", [
    ("def score(outputs, refs):\n    return 0.0\n", "score at {path}:1 takes 2 positional parameters, not 3"),
    ("def score(a, b, c, d):\n    return 0.0\n", "requires 4 positional parameters, not 3 (give the others defaults)"),
    ("def score(a, b, c, *, k):\n    return 0.0\n", "requires the keyword-only parameter k"),
    ("def score(a, b, c, *, k, j):\n    return 0.0\n", "requires the keyword-only parameters k, j"),
    ("def score(outputs):\n    return 0.0\n", "score at {path}:1 takes 1 positional parameter, not 3"),
    ("async def score(a, b, c):\n    return 0.0\n", "not a function defined in {mod}'s source ({path}: score is an async def)"),
    ("score = lambda a, b, c: 0.0\n", "score is bound by an assignment"),
    ("class score:\n    def __init__(self, a, b, c):\n        pass\n", "score is a class"),
    ("from os.path import join as score\n", "score is imported"),
    ("def score(a, b, c):\n    return 0.0\n\nscore = print\n", "score is bound by an assignment"),
    ("import sys\nif sys:\n    def score(a, b, c):\n        return 0.0\n", "score is bound by an if statement"),
    ("def other(a, b, c):\n    def score(a, b, c):\n        return 0\n", "score is not defined at its top level"),
    # rebound later, where the binding hides among other statements (each name of each statement counts)
    ("def score(a, b, c):\n    return 0.0\n\nimport score.sub\n", "score is imported"),
    ("def score(a, b, c):\n    return 0.0\n\nif True:\n    import score.sub\n", "score is bound by an if statement"),
    ("def score(a, b, c):\n    return 0.0\n\nif True:\n    import os\n    score = 1\n", "score is bound by an if statement"),
    ("def score(a, b, c):\n    return 0.0\n\nif True:\n    score = 1\n    def helper():\n        pass\n",
     "score is bound by an if statement"),
    ("def score(a, b, c)\n    return 0.0\n", "cannot read {path} (expected ':'"),
])
def test_a_metric_that_is_no_three_argument_def_is_refused(modules, tmp_path, source, message):
    name = modules("bad", source)
    with pytest.raises(UserError) as e:
        Requirement.parse(f"{name}:score<=1")
    assert message.format(path=tmp_path / f"{name}.py", mod=name) in str(e.value), str(e.value)
    assert "\n" not in str(e.value) and name not in sys.modules


@pytest.mark.parametrize("spec, message", [
    ("os:system", "metric 'os:system': not a function defined in os's source"),  # posix's C function, re-exported
    ("this:s", "metric 'this:s': not a function defined in this's source ("),  # a string; the Zen is not printed
    ("sys:exit", "sys is a compiled or built-in module (built-in), with no Python source to check"),
    ("math:sqrt", "math is a compiled or built-in module ("),
    ("os.path:join", "os is a module, not a package"),
    ("no_such_module_xyz:score", "metric 'no_such_module_xyz:score': no module 'no_such_module_xyz' here; is it on PYTHONPATH?"),
    ("no_such_module_xyz.sub:score", "no module 'no_such_module_xyz.sub' here"),
])
def test_code_that_is_not_a_metric_is_refused_without_running_it(spec, message, capsys):
    with pytest.raises(UserError) as e:
        Requirement.parse(f"{spec}<=1")
    assert str(e.value).startswith(message) or message in str(e.value), str(e.value)
    assert capsys.readouterr().out == ""  # `import this` would have printed the Zen of Python


def test_a_compiled_module_and_a_namespace_package_are_refused(modules, tmp_path):
    ext = modules("compiled", b"\x7fELF", path="{}" + importlib.machinery.EXTENSION_SUFFIXES[0])
    with pytest.raises(UserError, match=f"{ext} is a compiled or built-in module"):
        locate_metric(f"{ext}:score")
    ns = modules("ns", "def score(a, b, c):\n    return 0\n", path="{}/inner.py")
    with pytest.raises(UserError, match=f"{ns} is a namespace package"):
        locate_metric(f"{ns}:score")
    assert locate_metric(f"{ns}.inner:score").path == str(tmp_path / ns / "inner.py")


@pytest.mark.parametrize("spec", ["a..b:score", "mod:1x", "mod", ":score"])
def test_a_malformed_spec_is_refused(spec):
    with pytest.raises(UserError, match="a user metric is written module:function"):
        locate_metric(spec)


def test_reports_read_a_stored_requirement_without_looking_for_its_metrics():
    req = Requirement.parse("no_such_module_xyz:score<=1", load_user_metrics=False)
    assert req.user_metrics() == ["no_such_module_xyz:score"]


def test_source_hash_is_the_files_sha256_whole_or_its_first_characters(tmp_path):
    import hashlib

    from tuner.search.settings import file_hash

    path = tmp_path / "m.py"
    path.write_bytes(b"def score(outputs, refs, inputs):\n    return 0.0\n")
    full = hashlib.sha256(path.read_bytes()).hexdigest()
    assert source_hash(str(path)) == full  # a metric's source, as studies store it
    assert source_hash(str(path), 16) == file_hash(str(path)) == full[:16]  # a space file's (space_hash)
