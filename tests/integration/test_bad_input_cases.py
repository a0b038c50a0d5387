"""The case table of bad input (issue 29): one row per case, through the real `tuner` command line in this
process on real files. Every row: the exit code, key words of the message, no traceback, one error line
for a refusal (exit 2; notes may precede it where the input passed and the run failed), no file left
where the row says none may appear, and the user's own files unchanged."""
import hashlib
import os
import shutil
import sqlite3
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from cli_run import run_cli
from onnx import TensorProto, helper, numpy_helper

from tuner.errors import EXIT_ALL_FAILED, EXIT_NONE_FEASIBLE
from tuner.inputs.space import SPACES_DIR

SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")
SHAPE = ["--shape", "x=2x64x256"]
FAST = ["--space", SMALL, *SHAPE, "--max-timing-s", "0.3", "--quiet", "--no-select"]


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple  # "{NAME}" is an input file of the table (inputs()), "{demo}" the demo model
    code: int
    words: tuple  # all in stderr
    absent: tuple = ()  # paths (relative to the working folder) that must not exist afterwards
    unchanged: tuple = ("theirs.db", "notes.txt")  # the user's own files, copied into the working folder


def _tune(*args, study="s"):
    return ("tune", *args, "--study", study, "--n-trials", "1")


CASES = [
    # tracebacks before
    Case("model whose external data file is missing", _tune("{ext}"), 2, ("external data file", "missing"),
         absent=("studies",)),
    Case("inputs too large to allocate", _tune("{demo}", "--shape", "x=10000000x64x256"), 2,
         ("GiB", "free memory", "check --shape"), absent=("studies",)),
    Case("demo-model --out names a directory", ("demo-model", "--out", "."), 2, ("is a directory",)),
    Case("demo-model --out in a folder that does not exist", ("demo-model", "--out", "nowhere/m.onnx"), 2,
         ("does not exist",), absent=("nowhere",)),
    Case("--groups is not a regex", ("sensitivity", "{demo}", *SHAPE, "--groups", "(("), 2,
         ("--groups", "not a valid regular expression"), absent=("sensitivity-demo.csv",)),
    Case("--groups has no capture group", ("sensitivity", "{demo}", *SHAPE, "--groups", "block"), 2,
         ("0 capture groups", "exactly one"), absent=("sensitivity-demo.csv",)),
    # writes into the user's own files
    Case("tune into a SQLite file with the user's tables", _tune("{demo}", *SHAPE, "--storage", "sqlite:///theirs.db"),
         2, ("not Optuna's", "customers", "nothing was changed"), absent=("theirs.db-wal", "theirs.db.s.lock")),
    Case("tune into a text file as journal", _tune("{demo}", *SHAPE, "--storage", "journal:///notes.txt"), 2,
         ("not an Optuna journal",)),
    Case("migrate --to a SQLite file with the user's tables",
         ("migrate", "--from", "sqlite:///{optuna_db}", "--to", "sqlite:///theirs.db"), 2, ("not Optuna's",)),
    # files left behind by a refusal
    Case("demo --n-trials 0", ("demo", "--n-trials", "0", "--dir", "d"), 2, ("--n-trials", "at least 1"),
         absent=("d",)),
    Case("migrate a study that does not exist", ("migrate", "--from", "sqlite:///{optuna_db}", "--study", "nosuch",
                                                 "--to", "sqlite:///new.db"), 2, ("no study 'nosuch'",),
         absent=("new.db",)),
    Case("a failing user metric", ("evaluate", "{demo}", *SHAPE, "--space", SMALL, "--require", "failmetric:boom<=1"),
         2, ("failed during accuracy check", "ZeroDivisionError"), absent=("tuner-out",)),
    # accepted silently before
    Case("a model with an op no backend implements", _tune("{unknown_op}"), 2, ("FooBar", "my.dom", "standard ops"),
         absent=("studies",)),
    Case("all-NaN --data", _tune("{demo}", "--data", "{nan_data}"), 2, ("NaN or infinite", "finite inputs"),
         absent=("studies",)),
    Case("--shape contradicts --data", _tune("{demo}", "--data", "{data}", "--shape", "x=4x64x256"), 2,
         ("contradicts --data", "2x64x256"), absent=("studies",)),
    Case("a requirement below the metric's least value", _tune("{demo}", *SHAPE, "--require", "cos<=-1"), 2,
         ("at least 0", "no engine can meet it"), absent=("studies",)),
    Case("a key twice in a space file", _tune("{demo}", *SHAPE, "--space", "{dup_space}"), 2,
         ("given twice", "keep one"), absent=("studies",)),
    Case("negative --sensitivity-budget", _tune("{demo}", *SHAPE, "--sensitivity-budget", "-5"), 2,
         ("--sensitivity-budget", "0 or more"), absent=("studies",)),
    Case("--jobs 0", _tune("{demo}", *SHAPE, "--jobs", "0"), 2, ("--jobs", "at least 1"), absent=("studies",)),
    Case("--sampler grid over the default space (10^8 points and more, all built in memory by Optuna)",
         _tune("{demo}", *SHAPE, "--sampler", "grid"), 2, ("--sampler grid", "points", "smaller space"),
         absent=("studies",)),
    Case("an --engines-dir that cannot be written", _tune("{demo}", *SHAPE, "--engines-dir", "{a_file}/engines"), 2,
         ("--engines-dir", "cannot write there"), absent=("studies",)),
    Case("every trial fails", ("tune", "{failing}", "--study", "f", "--n-trials", "2", *FAST[:2], *FAST[4:]),
         EXIT_ALL_FAILED, ("every trial failed", "Reshape", "(exit 3)")),
    Case("nothing feasible under the requirement", ("tune", "{demo}", "--study", "z", "--n-trials", "1", *FAST,
                                                    "--require", "cos<=0"),
         EXIT_NONE_FEASIBLE, ("none of the 1 completed trials meets the requirement", "(exit 4)")),
    Case("more --jobs than cores", ("tune", "{demo}", "--study", "j", "--n-trials", "1", *FAST, "--jobs", "1000"), 0,
         ("--jobs 1000 is more than this machine's", "--jobs-over-cores")),
    Case("a metric that is not a function (and would print on import)", _tune("{demo}", *SHAPE, "--require", "this:s<=1"),
         2, ("this:s",), absent=("studies",)),
    Case("a callable that is no metric", _tune("{demo}", *SHAPE, "--require", "os:system<=1"), 2,
         ("os:system", "not a function defined in os's source"), absent=("studies",)),
    # misleading lines before
    Case("a directory as the model", _tune("{dir}"), 2, ("is a directory, not a model file",), absent=("studies",)),
    Case("a directory as --data", _tune("{demo}", "--data", "{dir}"), 2, ("is a directory, not a data file",),
         absent=("studies",)),
    Case("a directory as --space", _tune("{demo}", *SHAPE, "--space", "{dir}"), 2,
         ("is a directory, not a space file",), absent=("studies",)),
    Case("evaluate --out names a file", ("evaluate", "{demo}", *SHAPE, "--out", "{a_file}"), 2,
         ("is a file, not a folder",)),
    # kept from the first table of bad `tune` input
    Case("not an ONNX file", _tune("{not_onnx}", *SHAPE), 2, ("not an ONNX model",), absent=("studies",)),
    Case("a model the checker refuses", _tune("{broken}"), 2, ("fails the ONNX checker",), absent=("studies",)),
    Case("a dynamic input without --shape", _tune("{demo}"), 2, ("--shape x=",), absent=("studies",)),
    Case("--data without the model's input", _tune("{demo}", "--data", "{no_input}"), 2, ("no array for input 'x'",),
         absent=("studies",)),
    Case("--data of another dtype", _tune("{demo}", "--data", "{wrong_dtype}"), 2, ("has dtype int64",),
         absent=("studies",)),
    Case("--data of another shape", _tune("{demo}", "--data", "{wrong_shape}"), 2, ("expected [n_batches]",),
         absent=("studies",)),
    Case("a requirement that does not parse", _tune("{demo}", *SHAPE, "--require", "cos<0.1"), 2, ("cos<0.1",),
         absent=("studies",)),
    Case("a model of an opset the runtimes do not read", _tune("{opset99}", *SHAPE), 2,
         ("the model is opset 99, but onnxruntime reads up to opset", "computes the reference outputs",
          "opset_version="), absent=("studies",)),
    Case("a requirement whose limit is not finite", _tune("{demo}", *SHAPE, "--require", "cos<=1e999"), 2,
         ("cos<=1e999", "not a finite number"), absent=("studies",)),
    Case("an --enqueue item with no parameter name", _tune("{demo}", *SHAPE, "--enqueue", "precision=fp32,=3"), 2,
         ("--enqueue 'precision=fp32,=3'", "expected KEY=VALUE"), absent=("studies",)),
    Case("an unknown metric", _tune("{demo}", *SHAPE, "--require", "accuracy<=0.1"), 2, ("unknown metric",),
         absent=("studies",)),
    Case("an unknown key in a space file", _tune("{demo}", *SHAPE, "--space", "{unknown_key_space}"), 2,
         ("unknown key",), absent=("studies",)),
    Case("a storage that cannot be opened", _tune("{demo}", *SHAPE, "--storage", "sqlite:////proc/nope/s.db"), 2,
         ("cannot open",), absent=("studies",)),
    Case("a database server that does not answer",
         _tune("{demo}", *SHAPE, "--storage", "postgresql+psycopg://u:p@127.0.0.1:1/db"), 2, ("127.0.0.1:1",)),
    # issue 30, item 8: tuner trials, tuner profile, --ref-outputs
    Case("trials of a study that does not exist", ("trials", "--study", "nosuch"), 2, ("no study 'nosuch'",),
         absent=("studies",)),
    Case("trials --sort that is no order", ("trials", "--study", "s", "--sort", "fastest"), 2,
         ("--sort", "invalid choice: 'fastest'"), absent=("studies",)),
    Case("trials --csv in a folder that does not exist",
         ("trials", "--study", "other", "--storage", "sqlite:///{optuna_db}", "--csv", "nowhere/t.csv"), 2,
         ("--csv", "does not exist"), absent=("nowhere",)),
    Case("profile of a study that does not exist", ("profile", "--study", "nosuch"), 2, ("no study 'nosuch'",),
         absent=("studies",)),
    Case("profile of a study engine-tuner did not make", ("profile", "--study", "other", "--storage",
                                                          "sqlite:///{optuna_db}"), 2, ("not made by engine-tuner",)),
    Case("--ref-outputs without --data", _tune("{demo}", *SHAPE, "--ref-outputs", "{refs}"), 2,
         ("--ref-outputs", "needs --data"), absent=("studies",)),
    Case("evaluate --ref-outputs without --data", ("evaluate", "{demo}", *SHAPE, "--ref-outputs", "{refs}"), 2,
         ("--ref-outputs", "needs --data"), absent=("tuner-out",)),
    Case("sensitivity --ref-outputs without --data", ("sensitivity", "{demo}", *SHAPE, "--ref-outputs", "{refs}"), 2,
         ("--ref-outputs", "needs --data"), absent=("sensitivity-demo.csv",)),
    Case("--ref-outputs without the model's output", _tune("{demo}", "--data", "{data}", "--ref-outputs", "{refs_other}"),
         2, ("--ref-outputs", "no array for model output 'y'"), absent=("studies",)),
    Case("--ref-outputs of another shape", _tune("{demo}", "--data", "{data}", "--ref-outputs", "{refs_shape}"), 2,
         ("output 'y' has shape [2, 2, 64, 100]", "[2, 64, 256]"), absent=("studies",)),
    Case("--ref-outputs of another dtype", _tune("{demo}", "--data", "{data}", "--ref-outputs", "{refs_dtype}"), 2,
         ("output 'y' has dtype float64", "float32"), absent=("studies",)),
    Case("--ref-outputs of another batch count", _tune("{demo}", "--data", "{data}", "--ref-outputs", "{refs_count}"),
         2, ("3 batches", "--data has 2"), absent=("studies",)),
    Case("--ref-outputs with NaN", _tune("{demo}", "--data", "{data}", "--ref-outputs", "{refs_nan}"), 2,
         ("NaN or infinite", "finite outputs"), absent=("studies",)),
]

FAIL_METRIC = "def boom(outputs, refs, inputs):\n    return 1 / 0\n"


def _model(path, nodes, inputs, outputs, inits=(), opsets=(("", 17),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]), path)
    return str(path)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, demo_path):
    d = tmp_path_factory.mktemp("inputs")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y25 = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 5])
    files = {"demo": demo_path, "dir": str(d / "a_dir")}
    os.mkdir(files["dir"])
    # weights saved beside the model, then lost
    weight = numpy_helper.from_array(np.ones((6, 6), np.float32), "W")
    model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g", [x],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])], [weight]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, d / "ext.onnx", save_as_external_data=True, location="ext.bin", size_threshold=0)
    os.remove(d / "ext.bin")
    files["ext"] = str(d / "ext.onnx")
    files["unknown_op"] = _model(d / "unknown.onnx", [helper.make_node("FooBar", ["x"], ["y"], domain="my.dom")], [x],
                                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
                                 opsets=(("", 17), ("my.dom", 1)))
    # valid ONNX that fails in every run: 12 values reshaped to 25
    files["failing"] = _model(d / "failing.onnx", [helper.make_node("Reshape", ["x", "s"], ["y"])], [x], [y25],
                              [helper.make_tensor("s", TensorProto.INT64, [2], [5, 5])])
    x4 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    files["broken"] = _model(d / "broken.onnx", [helper.make_node("Add", ["x", "nowhere"], ["y"])], [x4],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], opsets=())
    future = onnx.load(demo_path)  # the demo stamped with an opset no runtime of today reads
    future.opset_import[0].version = 99
    onnx.save(future, d / "opset99.onnx")
    files["opset99"] = str(d / "opset99.onnx")
    (d / "notonnx.onnx").write_text("hello")
    files["not_onnx"] = str(d / "notonnx.onnx")
    for name, array in {"nan_data": np.full((2, 2, 64, 256), np.nan, np.float32),
                        "data": np.zeros((2, 2, 64, 256), np.float32),
                        "wrong_dtype": np.zeros((2, 2, 64, 256), np.int64),
                        "wrong_shape": np.zeros((2, 2, 64, 100), np.float32)}.items():
        np.savez(d / f"{name}.npz", x=array)
        files[name] = str(d / f"{name}.npz")
    np.savez(d / "no_input.npz", other=np.zeros((2, 2, 64, 256), np.float32))
    for name, array in {"refs": np.zeros((2, 2, 64, 256), np.float32),
                        "refs_shape": np.zeros((2, 2, 64, 100), np.float32),
                        "refs_dtype": np.zeros((2, 2, 64, 256), np.float64),
                        "refs_count": np.zeros((3, 2, 64, 256), np.float32),
                        "refs_nan": np.full((2, 2, 64, 256), np.nan, np.float32)}.items():
        np.savez(d / f"{name}.npz", y=array)
        files[name] = str(d / f"{name}.npz")
    np.savez(d / "refs_other.npz", z=np.zeros((2, 2, 64, 256), np.float32))
    files["refs_other"] = str(d / "refs_other.npz")
    files["no_input"] = str(d / "no_input.npz")
    small = open(SMALL).read()
    (d / "dup.yaml").write_text(small.replace("parameters:", "name: again\nparameters:", 1))
    (d / "unknown_key.yaml").write_text(small + "colour: blue\n")
    files["dup_space"], files["unknown_key_space"] = str(d / "dup.yaml"), str(d / "unknown_key.yaml")
    (d / "a_file").write_text("not a folder")
    files["a_file"] = str(d / "a_file")
    (d / "failmetric.py").write_text(FAIL_METRIC)
    con = sqlite3.connect(d / "theirs.db")
    con.execute("CREATE TABLE customers (id INTEGER)")
    con.commit()
    con.close()
    (d / "notes.txt").write_text("the user's notes\n")
    files["optuna_db"] = str(d / "optuna.db")
    import optuna

    optuna.create_study(study_name="other", storage=f"sqlite:///{files['optuna_db']}")
    return d, files


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.isfile(path) else "missing"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_case(case, inputs, tmp_path, capsys, monkeypatch):
    folder, files = inputs
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(folder))  # failmetric.py
    for name in case.unchanged:
        shutil.copy(folder / name, tmp_path / name)
    before = {name: _digest(name) for name in case.unchanged}
    argv = [a.format(**files) for a in case.argv]
    code, out, err = run_cli(argv, capsys)
    assert code == case.code, err
    assert "Traceback" not in err, err
    for word in case.words:
        assert word in err, (word, err)
    if code == 2:  # nothing on stdout (no module of a metric ran at parse time); one line, after any notes
        assert out == "", out
        lines = [line for line in err.strip().splitlines() if not line.startswith("note: ")]
        assert len(lines) == 1 and lines[0].startswith("tuner") and ": error: " in lines[0], err
    for path in case.absent:
        assert not os.path.exists(path), path
    assert {name: _digest(name) for name in case.unchanged} == before
