"""A backend from another distribution: tests/fixtures/tiny_backend, installed by pip as its own package
(into a folder on PYTHONPATH, not this repository's), registers through the `engine_tuner.backends` entry
point alone and passes the contract test every built-in backend passes."""
import os
import subprocess
import sys

from fixture_backends import REPO, install


def test_an_installed_third_party_backend_registers_and_passes_the_contract(tmp_path):
    env = install("tiny_backend", tmp_path) | {"TUNER_REQUIRE_BACKENDS": "tiny"}  # a skip would fail
    listed = subprocess.run([sys.executable, "-c", "from tuner.backends.base import known_backends as k; print(k())"],
                            env=env, capture_output=True, text=True, check=True)
    assert "'tiny'" in listed.stdout
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "tiny",
                        os.path.join(REPO, "tests", "backends", "test_contract.py")],
                       cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    # fp32 output, every route builds or refuses, save/load/usage; no quantizing route to keep layers in float
    assert "3 passed, 1 skipped" in r.stdout, r.stdout[-2000:]
