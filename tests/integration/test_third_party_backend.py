"""A backend from another distribution: tests/fixtures/tiny_backend, installed by pip as its own package
(into a folder on PYTHONPATH, not this repository's), registers through the `engine_tuner.backends` entry
point alone and passes the contract test every built-in backend passes."""
import json
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
    assert "4 passed, 1 skipped" in r.stdout, r.stdout[-2000:]


TINY_SPACE = """\
name: tiny
backend: tiny
parameters:
  precision: {type: categorical, choices: [fp32], default: fp32}
"""


def test_a_third_party_backend_brings_its_own_command_and_tuner_profile_reads_its_profiler(tmp_path):
    from tuner.cli.demo import write_demo_model

    env = install("tiny_backend", tmp_path)
    tuner = [sys.executable, "-m", "tuner.cli.main"]

    def run(*args):
        r = subprocess.run(tuner + list(args), cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        return r.stdout

    assert "tiny-info" in run("--help")
    assert json.loads(run("tiny-info", "--json"))["tiny"] == "0.1"  # its own parser and its own code
    write_demo_model(str(tmp_path / "demo.onnx"))
    (tmp_path / "tiny.yaml").write_text(TINY_SPACE)
    url = f"sqlite:///{tmp_path / 't.db'}"
    run("tune", "demo.onnx", "--space", "tiny.yaml", "--study", "t", "--storage", url, "--shape", "x=2x64x256",
        "--n-trials", "1", "--no-select", "--quiet", "--max-timing-s", "0.3")
    lines = run("profile", "--study", "t", "--storage", url, "--trial", "0").splitlines()
    assert lines[0] == "trial 0: fp32 on tiny" and lines[1].startswith("baseline (trial 0): fp32 on tiny")
    head = next(i for i, line in enumerate(lines) if line.startswith("node "))
    rows = lines[head + 1:]
    assert rows[-1].split()[0] == "total" and rows[-1].split()[2] == "100.0%"
    # the demo's heaviest nodes, named as in the model, from the tiny backend's own ONNX Runtime profile
    assert any(r.startswith(f"block{i}/ffn/fc") for r in rows[:8] for i in range(4)), lines
