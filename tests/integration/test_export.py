"""`tuner export` never touches a file it did not write: a non-empty --out is refused unless --force, and
--force replaces only what the export manifest lists. Real rebuilds of a real study's winner."""
import json
import os

import pytest

from tuner.cli.main import main
from tuner.measure.latency import LatencyProtocol
from tuner.run.options import TuneOptions
from tuner.run.tune import tune_study
from tuner.store import artifacts
from tuner.winner.export_files import MANIFEST


@pytest.fixture(scope="module")
def url(tmp_path_factory, demo_path):
    tmp = tmp_path_factory.mktemp("export")
    url = f"sqlite:///{tmp}/s.db"
    tune_study(TuneOptions.of(study="s", model=demo_path, storage=url, shapes=["x=2x64x256"], require="cos<=0.005", n_trials=1,
                     protocol=LatencyProtocol(warmup=1, min_runs=3, max_runs=8, max_seconds=1), progress=False,
                     quiet=True, top_k=1))
    return url


def _export(url, out, *extra):
    return main(["export", "--study", "s", "--storage", url, "--out", str(out), *extra])


def _tree(root) -> dict[str, bytes]:
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, fs in os.walk(root) for f in fs}


def test_a_users_files_in_out_survive(url, tmp_path, capsys):
    out = tmp_path / "userdir"
    (out / "engine").mkdir(parents=True)
    (out / "engine" / "mine.txt").write_text("my notes")
    (out / "README").write_text("mine too")
    before = _tree(out)
    assert _export(url, out) == 2
    err = capsys.readouterr().err
    assert f"--out {out} is not empty" in err and "--force" in err and err.count("\n") == 1
    assert _tree(out) == before  # refused: nothing written, nothing removed

    assert _export(url, out, "--force") == 0
    after = _tree(out)
    assert after["engine/mine.txt"] == b"my notes" and after["README"] == b"mine too"
    manifest = json.loads(after[MANIFEST])
    assert set(manifest["files"]) == set(after) - {"engine/mine.txt", "README", MANIFEST}
    assert {"config.json", "report.json", "engine/model.onnx", "engine/session_options.json"} <= set(manifest["files"])
    report = json.loads(after["report.json"])
    assert f"{out}/engine/model.onnx" in report["usage"] and ".export-" not in report["usage"]
    # the engine selection timed, from the study's artifact store (s-artifacts beside s.db), not a rebuild
    assert report["engine_source"]["kind"] == "artifact" and report["engine_source"]["files"] == {
        f[len("engine/"):]: artifacts.sha256_of(os.path.join(out, f)) for f in manifest["files"] if f.startswith("engine/")}


def test_force_replaces_only_what_the_last_export_wrote(url, tmp_path, capsys):
    out = tmp_path / "w"
    assert _export(url, out) == 0  # a new folder needs no --force
    assert _export(url, out) == 2
    assert "an earlier export: --force replaces its files" in capsys.readouterr().err
    # a file the last export listed but this one does not write goes; a user's file beside it stays
    manifest = json.loads((out / MANIFEST).read_text())
    (out / "engine" / "stale.bin").write_text("old engine part")
    (out / MANIFEST).write_text(json.dumps(manifest | {"files": manifest["files"] + ["engine/stale.bin"]}))
    (out / "engine" / "mine.txt").write_text("keep me")
    (out / "report.json").write_text("{}")
    assert _export(url, out, "--force") == 0
    tree = _tree(out)
    assert "engine/stale.bin" not in tree and tree["engine/mine.txt"] == b"keep me"
    assert json.loads(tree["report.json"])["kind"] == "winner"
    assert not [n for n in os.listdir(out) if n.startswith(".export-")]


def test_force_never_overwrites_a_file_no_export_wrote(url, tmp_path, capsys):
    out = tmp_path / "w"
    out.mkdir()
    (out / "config.json").write_text("the user's config")
    assert _export(url, out, "--force") == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if not line.startswith("note: ")]  # found after the rebuild
    assert len(errors) == 1 and "config.json is there and no earlier export wrote it" in errors[0]
    assert _tree(out) == {"config.json": b"the user's config"}


def test_out_naming_a_file_is_one_line(url, tmp_path, capsys):
    target = tmp_path / "engine.onnx"
    target.write_text("not a folder")
    for extra in ([], ["--force"]):
        assert _export(url, target, *extra) == 2
        err = capsys.readouterr().err
        assert f"--out {target} is a file, not a folder" in err and "Traceback" not in err and err.count("\n") == 1
    assert target.read_text() == "not a folder"
