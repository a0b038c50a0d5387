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
