"""Install a backend of tests/fixtures as a third party's distribution: pip installs it into a folder of its
own (not this repository's), and it registers through the `engine_tuner.backends` entry point alone."""
import os
import shutil
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def install(fixture: str, tmp_path) -> dict:
    """pip-install tests/fixtures/<fixture> into tmp_path/site; the environment in which it is registered."""
    source = shutil.copytree(os.path.join(REPO, "tests", "fixtures", fixture), tmp_path / f"{fixture}-src")
    site = tmp_path / f"{fixture}-site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(source)], check=True, capture_output=True)
    assert any(p.endswith(".dist-info") for p in os.listdir(site))  # installed as a distribution, not copied
    path = os.pathsep.join([str(site)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return os.environ | {"PYTHONPATH": path}


# The clockwork backend's space: a few thousand configs, results fixed by the config (tests/fixtures/clockwork_backend).
CLOCKWORK_SPACE = """\
name: clockwork
backend: clockwork
parameters:
  a: {type: int, low: 0, high: 15, default: 0}
  b: {type: categorical, choices: [p, q, r, s], default: p}
  c: {type: bool, default: false}
  d: {type: int, low: 1, high: 8, default: 1}
"""


def clockwork_study(tmp_path) -> dict:
    """Install the clockwork backend and write the demo model (demo.onnx) and its space (clockwork.yaml) into
    tmp_path; the environment in which `tuner tune` finds the backend."""
    from tuner.cli.demo import write_demo_model

    env = install("clockwork_backend", tmp_path)
    write_demo_model(str(tmp_path / "demo.onnx"))
    (tmp_path / "clockwork.yaml").write_text(CLOCKWORK_SPACE)
    return env


def clockwork_tune_args(tmp_path, db: str, max_trials: int) -> list[str]:
    """`tuner tune` over the clockwork study in tmp_path, on the SQLite file tmp_path/db."""
    return ["tune", str(tmp_path / "demo.onnx"), "--space", str(tmp_path / "clockwork.yaml"), "--study", "s",
            "--storage", f"sqlite:///{tmp_path / db}", "--shape", "x=2x64x256", "--require", "cos<=0.005",
            "--seed", "7", "--max-trials", str(max_trials), "--no-select", "--quiet", "--max-timing-s", "0.3"]
