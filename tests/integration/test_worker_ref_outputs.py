"""`tuner worker --ref-outputs`: a worker on a host where the study's reference outputs (tuner tune --ref-outputs)
lie elsewhere passes them as it passes --data; their hash must be the study's. A SQLite file stands in for the
shared database, a moved folder for the other host."""
import os

import numpy as np
import onnxruntime as ort
import pytest
from cli_run import run_cli

from tuner.errors import UserError
from tuner.inputs.space import SPACES_DIR
from tuner.measure.requirement import Requirement
from tuner.problem.spec import ProblemSpec
from tuner.run.join import _localized
from tuner.search.settings import StudySettings
from tuner.store.storage import load_study

SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")
FAST = ["--space", SMALL, "--max-timing-s", "0.3", "--quiet"]


def _refusal(code: int, out: str, err: str, *words: str) -> None:
    """Exit 2, one error line (no traceback) that holds the words."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and ": error: " in lines[0], (code, out, err)
    for word in words:
        assert word in err, (word, err)


def _files(folder, demo_path) -> None:
    """Validation data (2 batches of 1x64x256), ONNX Runtime's fp32 outputs of it as the framework's reference,
    and the same outputs x1.02 (another file)."""
    os.makedirs(folder)
    x = np.random.default_rng(0).standard_normal((2, 1, 64, 256)).astype(np.float32)
    np.savez(folder / "data.npz", x=x)
    session = ort.InferenceSession(demo_path, providers=["CPUExecutionProvider"])
    y = np.stack([session.run(None, {"x": b})[0] for b in x])
    np.savez(folder / "refs.npz", y=y)
    np.savez(folder / "other.npz", y=(y * 1.02).astype(np.float32))


def test_a_worker_relocates_the_studys_reference_outputs(demo_path, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made, here = tmp_path / "made", tmp_path / "here"
    _files(made, demo_path)
    url = f"sqlite:///{tmp_path}/w.db"
    code, _, err = run_cli(["tune", demo_path, "--study", "w", "--storage", url, "--data", str(made / "data.npz"),
                            "--ref-outputs", str(made / "refs.npz"), *FAST, "--require", "cos<=0.005", "--seed", "0",
                            "--n-trials", "1", "--no-select"], capsys)
    assert code == 0, err
    os.rename(made, here)  # the worker's host: the same files in another folder
    worker = ["worker", "--study", "w", "--storage", url, "--max-timing-s", "0.3", "--quiet", "--n-trials", "1",
              "--data", str(here / "data.npz")]
    # not given: the stored path is not on this host
    _refusal(*run_cli(worker, capsys), str(made / "refs.npz"), "not on this host", "--ref-outputs")
    # another file: its hash is not the study's
    _refusal(*run_cli([*worker, "--ref-outputs", str(here / "other.npz")], capsys),
             "not the study's reference outputs", "give the same file with --ref-outputs")
    _refusal(*run_cli([*worker, "--ref-outputs", str(here / "none.npz")], capsys), "--ref-outputs", "no such file")
    assert len(load_study("w", url, reading=True).trials) == 1  # the refusals ran nothing
    # the moved file: the worker runs its trial against it
    code, out, err = run_cli([*worker, "--ref-outputs", str(here / "refs.npz")], capsys)
    assert code == 0 and "1 trials run" in out, out + err
    trials = load_study("w", url, reading=True).trials
    assert len(trials) == 2 and trials[-1].user_attrs.get("metrics"), trials[-1].user_attrs
    settings = load_study("w", url, reading=True).user_attrs["tuner_settings"]
    assert settings["ref_outputs"] == str(made / "refs.npz")  # the worker wrote nothing to the study's settings


def test_a_study_made_without_reference_outputs_refuses_the_flag(tmp_path):
    plain = StudySettings(ProblemSpec(str(tmp_path / "m.onnx"), data=str(tmp_path / "d.npz")), Requirement(()))
    refs = tmp_path / "refs.npz"
    np.savez(refs, y=np.zeros(1, np.float32))
    with pytest.raises(UserError, match=r"^--ref-outputs .*refs\.npz: study 'p' was made without --ref-outputs.*"
                                        r"run the worker without --ref-outputs"):
        _localized("p", plain, "ref_outputs", str(refs), "reference outputs", "--ref-outputs")
    assert _localized("p", plain, "ref_outputs", None, "reference outputs", "--ref-outputs") is None
