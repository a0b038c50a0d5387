"""Engines as Optuna artifacts (tuner.store.artifacts): a study tuned by `--jobs 2` worker processes on one host
uploads the engines its selection timed (and, with --keep-engines, every trial's, as the worker timed it);
`tuner export` on another host (another folder, the study's folder copied there, the first host gone)
writes the very bytes that were uploaded, checked against their sha256, and --rebuild still rebuilds."""
import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import optuna
import pytest

from tuner.execute.results import Confirmed, Rebuilt
from tuner.inputs.space import SPACES_DIR
from tuner.search.record import WINNER_ATTR
from tuner.store import artifacts
from tuner.store.storage import load_study, open_storage
from tuner.winner.select import _upload_finalists

SMALL = os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")  # no per-layer analysis: seconds


def tuner(cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli.main", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, demo_path):
    """Host A tunes with the defaults (studies/a.db, studies/a-engines, studies/a-artifacts) in its own folder;
    then its studies/ folder is copied to host B and host A is removed. Returns (host B, what A's kept engines held)."""
    root = tmp_path_factory.mktemp("hosts")
    a, b = root / "a", root / "b"
    a.mkdir()
    r = tuner(a, "tune", demo_path, "--study", "a", "--space", SMALL, "--shape", "x=2x64x256", "--require", "cos<=0.005",
              "--max-timing-s", "0.3", "--n-trials", "4", "--jobs", "2", "--jobs-over-cores", "--seed", "1",
              "--enqueue", "precision=int8-dynamic", "--top-k", "2", "--keep-engines", "--quiet",
              "--timing", "alone")  # paired timing stopped early on a busy machine is no finalist: maybe no winner
    assert r.returncode == 0 and "winner: trial" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
    engines = a / "studies" / "a-engines"
    kept = {int(d.split("-")[1]): artifacts.file_digests(str(engines / d)) for d in os.listdir(engines)}
    shutil.copytree(a / "studies", b / "studies", ignore=shutil.ignore_patterns("a-engines", "*.lock"))
    shutil.rmtree(a)  # the engines that were timed exist nowhere but in the artifact store now
    return b, kept


def _study(host):
    return load_study("a", f"sqlite:///{host}/studies/a.db", reading=True)


def test_selection_and_kept_trial_engines_are_uploaded_with_their_sha256(hosts):
    host, kept = hosts
    study = _study(host)
    winner = study.user_attrs[WINNER_ATTR]
    records = artifacts.engine_records(study)
    store = host / "studies" / "a-artifacts"
    assert sorted(os.listdir(store)) == sorted(r["id"] for r in records)
    for r in records:  # the tar in the store is the one uploaded
        assert artifacts.sha256_of(str(store / r["id"])) == r["sha256"]
    # every trial engine the workers kept was uploaded as they timed it
    trial_recs = {r["trial"]: r for r in records if r["source"] == artifacts.TRIAL}
    assert trial_recs and set(trial_recs) <= set(kept)
    for n, rec in trial_recs.items():
        assert rec["files"] == kept[n]
    built_here = {t.number for t in study.trials if t.state.name == "COMPLETE" and "reused_from" not in t.user_attrs}
    assert built_here == set(trial_recs)
    # the winner names the engine its selection timed; every confirmed finalist's is in the store too
    own = winner["engine_artifact"]
    assert own["source"] == artifacts.SELECTION and {"model.onnx", "session_options.json"} <= set(own["files"])
    assert own["id"] in {r["id"] for r in records} and own["main"] == "model.onnx"
    finalist_ids = {f["engine_artifact"] for f in winner["finalists"] if f["feasible"]}
    assert own["id"] in finalist_ids and finalist_ids <= {r["id"] for r in records}
    assert study.user_attrs[artifacts.STORE_ATTR]["keep"] == "all"  # --keep-engines


def test_status_says_the_artifacts_disk_use(hosts):
    host, _ = hosts
    r = tuner(host, "status", "--study", "a")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("artifacts: "))
    n = len(artifacts.engine_records(_study(host)))
    assert line.startswith(f"artifacts: {n} engines (") and f" MB in {host / 'studies' / 'a-artifacts'}" in line


def test_export_on_another_host_writes_the_bytes_that_were_timed(hosts, tmp_path):
    host, kept = hosts
    winner = _study(host).user_attrs[WINNER_ATTR]
    out = tmp_path / "out"
    r = tuner(host, "export", "--study", "a", "--out", out, "--no-verify")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"on the engine as timed (artifact {winner['engine_artifact']['id']}, sha256 checked)" in r.stdout
    assert "rebuilt" not in r.stderr
    got = artifacts.file_digests(str(out / "engine"))
    assert got == winner["engine_artifact"]["files"]  # byte for byte what selection timed and uploaded
    report = json.loads((out / "report.json").read_text())
    src = report["engine_source"]
    assert src["kind"] == "artifact" and src["sha256"] == winner["engine_artifact"]["sha256"] and src["files"] == got
    assert report["meets_requirement"] and report["engine"] == os.path.join("engine", "model.onnx")
    # --rebuild keeps today's path: built again from the config (equal bytes or not: only said)
    again = tmp_path / "again"
    r = tuner(host, "export", "--study", "a", "--out", again, "--no-verify", "--rebuild")
    assert r.returncode == 0 and "on the rebuilt engine" in r.stdout, r.stdout + r.stderr
    assert json.loads((again / "report.json").read_text())["engine_source"] == {"kind": "rebuilt"}
    same = artifacts.file_digests(str(again / "engine")) == got
    print(f"a fresh rebuild of trial {winner['trial']} is {'byte-identical to' if same else 'DIFFERENT from'} "
          f"the timed engine; the worker's own trial engine is "
          f"{'identical' if kept.get(winner['trial']) == got else 'different or not kept'}")


def test_a_changed_artifact_is_refused_and_an_old_study_rebuilds(hosts, tmp_path):
    host, _ = hosts
    copy = tmp_path / "c"
    shutil.copytree(host / "studies", copy / "studies")
    study = load_study("a", f"sqlite:///{copy}/studies/a.db")
    winner = study.user_attrs[WINNER_ATTR]
    with open(copy / "studies" / "a-artifacts" / winner["engine_artifact"]["id"], "ab") as f:
        f.write(b"\0")
    r = tuner(copy, "export", "--study", "a", "--out", tmp_path / "bad", "--no-verify")
    errors = [x for x in r.stderr.splitlines() if not x.startswith("note: ")]
    assert r.returncode == 2 and len(errors) == 1 and "sha256" in errors[0] and "--rebuild" in errors[0], r.stderr
    assert not (tmp_path / "bad").exists()
    # a study selected before engines were uploaded: no record of any engine; export rebuilds, in one line
    for r_ in artifacts.engine_records(study):
        study.set_user_attr(artifacts.ENGINE_PREFIX + r_["id"], None)
    study.set_user_attr(WINNER_ATTR, {k: v for k, v in winner.items() if k != "engine_artifact"})
    r = tuner(copy, "export", "--study", "a", "--out", tmp_path / "old", "--no-verify")
    assert r.returncode == 0 and "on the rebuilt engine" in r.stdout, r.stdout + r.stderr
    notes = [x for x in r.stderr.splitlines() if "rebuilt from its config" in x]
    assert len(notes) == 1 and notes[0].startswith(f"note: trial {winner['trial']}: rebuilt"), r.stderr


# ---- the pieces, without builds

def _fake_engine(folder, payload: bytes) -> None:
    os.makedirs(folder)
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(payload)


def test_pack_is_deterministic_and_storage_files_are_found(tmp_path):
    _fake_engine(tmp_path / "e", os.urandom(5000))
    os.utime(tmp_path / "e" / "model.onnx", (1, 1))
    artifacts.pack(str(tmp_path / "e"), str(tmp_path / "1.tar"))
    os.utime(tmp_path / "e" / "model.onnx", (2, 2))
    artifacts.pack(str(tmp_path / "e"), str(tmp_path / "2.tar"))
    assert artifacts.sha256_of(str(tmp_path / "1.tar")) == artifacts.sha256_of(str(tmp_path / "2.tar"))
    for url in (f"sqlite:///{tmp_path}/s.db", f"journal:///{tmp_path}/s.log"):
        study = optuna.create_study(study_name="s", storage=open_storage(url))
        assert artifacts.resolve_store(study) == artifacts.StoreRef(str(tmp_path / "s-artifacts"), default=True)
    assert artifacts.resolve_store(optuna.create_study()) is None  # nowhere to put a default folder
    assert artifacts.normalize_url("s3://bucket/pre/") == "s3://bucket/pre"
    with pytest.raises(Exception, match="unknown kind"):
        artifacts.normalize_url("ftp://x/y")


def _confirmed() -> Confirmed:
    """A finalist that passed selection's re-check, its engine saved as model.onnx (its timing is not read here)."""
    return Confirmed(Rebuilt({"cos": 0.0}, True, None, "onnxruntime", "cpu", "model.onnx"))


@pytest.mark.parametrize("keep_all", [False, True])
def test_a_new_selection_replaces_the_last_ones_engines_unless_all_are_kept(tmp_path, keep_all):
    study = optuna.create_study(study_name="s", storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    store = artifacts.resolve_store(study)
    _fake_engine(tmp_path / "old", b"old")
    _fake_engine(tmp_path / "kept", b"trial")
    earlier = artifacts.upload_engine(study, store, str(tmp_path / "old"), 3, artifacts.SELECTION, "model.onnx")
    trial = artifacts.upload_engine(study, store, str(tmp_path / "kept"), 3, artifacts.TRIAL)
    _fake_engine(tmp_path / "saved" / "0", b"new")
    new = _upload_finalists(study, store, [SimpleNamespace(number=5)], [_confirmed()], str(tmp_path / "saved"), keep_all)
    live = {r["id"] for r in artifacts.engine_records(study)}
    assert new[5]["id"] in live and trial["id"] in live  # a kept trial engine is never replaced
    assert (earlier["id"] in live) == keep_all and (earlier["id"] in os.listdir(store.url)) == keep_all
    assert artifacts.engine_of(study, {"trial": 3}) == trial  # no selection's engine of it: the kept one


def test_drop_selection_engines_removes_the_selections_engines_only_where_they_are_no_ones(tmp_path):
    study = optuna.create_study(study_name="s", storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    store = artifacts.resolve_store(study)
    assert artifacts.drop_selection_engines(study, store, False) == 0 and not os.path.exists(store.url)  # not opened
    _fake_engine(tmp_path / "sel", b"sel")
    _fake_engine(tmp_path / "kept", b"trial")
    sel = artifacts.upload_engine(study, store, str(tmp_path / "sel"), 1, artifacts.SELECTION, "model.onnx")
    kept = artifacts.upload_engine(study, store, str(tmp_path / "kept"), 1, artifacts.TRIAL)
    assert artifacts.selection_engines(study) == [sel]
    assert artifacts.drop_selection_engines(study, store, True) == 0  # --keep-engines: all kept
    assert artifacts.drop_selection_engines(study, None, False) == 0  # no store
    assert artifacts.drop_selection_engines(study, store, False, []) == 0  # none listed before: none go
    assert artifacts.drop_selection_engines(study, store, False) == 1
    assert artifacts.engine_records(study) == [kept] and os.listdir(store.url) == [kept["id"]]


def test_a_given_store_is_stored_in_the_study_and_a_command_can_read_elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(study_name="s", storage=open_storage(url))
    store = artifacts.remember_store(study, "shared/store", "all")  # tune --artifacts shared/store --keep-engines
    assert store == artifacts.StoreRef(str(tmp_path / "shared" / "store"))
    again = load_study("s", url, reading=True)  # another command, on another host: the stored store
    assert artifacts.resolve_store(again) == store and artifacts.stored_keep(again) == "all"
    assert artifacts.remember_store(again, None, "all") == store
    assert artifacts.resolve_store(again, "/mnt/x").url == "/mnt/x"  # export --artifacts where it is mounted here


@pytest.mark.parametrize("keep", ["winner", "finalists"])
def test_keep_artifacts_winner_uploads_the_winners_engine_alone(tmp_path, keep):
    study = optuna.create_study(study_name="s", storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    store = artifacts.resolve_store(study)
    for i, content in enumerate((b"winner", b"finalist")):
        _fake_engine(tmp_path / "saved" / str(i), content)
    done = _confirmed()
    new = _upload_finalists(study, store, [SimpleNamespace(number=5), SimpleNamespace(number=6)], [done, done],
                            str(tmp_path / "saved"), False, 5 if keep == "winner" else None)
    assert sorted(new) == ([5] if keep == "winner" else [5, 6])
    assert sorted(r["trial"] for r in artifacts.engine_records(study)) == sorted(new)
    assert len(os.listdir(store.url)) == len(new)


def test_the_stored_keep_choice_and_the_one_before_it(tmp_path):
    study = optuna.create_study(study_name="s", storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    assert artifacts.stored_keep(study) is None  # select then keeps the winner's (search.choices)
    for stored, keep in (({"url": None, "keep_all": True}, "all"), ({"url": None, "keep_all": False}, "finalists"),
                         ({"url": None, "keep": "winner"}, "winner")):
        study.set_user_attr(artifacts.STORE_ATTR, stored)
        assert artifacts.stored_keep(study) == keep
    artifacts.remember_store(study, None, "finalists")
    assert study.user_attrs[artifacts.STORE_ATTR] == {"url": None, "keep": "finalists"}
