"""The built wheel, installed into a fresh virtual environment (not editable), has every module and
the built-in spaces: `tuner space` runs on the demo model with the default space."""
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

REPO = os.path.join(os.path.dirname(__file__), "..", "..")


def test_the_wheel_ships_every_module_and_the_default_space(tmp_path):
    # built from a copy, so the build leaves nothing (build/, *.egg-info) in the repository
    src = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "tuner"), src / "tuner", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(REPO, "search_spaces"), src / "search_spaces")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(REPO, name), src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
                    str(src)], check=True, capture_output=True)
    wheel, = glob.glob(str(tmp_path / "engine_tuner-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    here = {os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "tuner", "**", "*.py"), recursive=True)}
    assert sorted(here - names) == []
    assert {f"tuner/search_spaces/{n}.yaml" for n in ("onnxruntime-cpu", "openvino-cpu", "cpu")} <= names
    # A fresh venv sees this one's dependencies through a .pth line; the wheel itself is installed plainly.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps", "-q",
                    wheel], check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "tuner.cli.main", "demo-model", "--out", "demo.onnx"], cwd=elsewhere, check=True, env=env,
                   capture_output=True)
    r = subprocess.run([py, "-m", "tuner.cli.main", "space", "demo.onnx"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    default = "cpu" if importlib.util.find_spec("openvino") else "onnxruntime-cpu"  # where OpenVINO is installed
    assert f"space {default} (" in r.stdout and os.path.join("tuner", "search_spaces") in r.stdout, r.stdout
    where = subprocess.run([py, "-c", "import tuner; print(tuner.__file__)"], cwd=elsewhere, env=env,
                           capture_output=True, text=True).stdout
    assert where.startswith(site), where  # the wheel's copy ran, not the repository's
