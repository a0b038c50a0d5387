"""Many workers on one study through a real PostgreSQL server, as real `tuner` processes.

The server comes from TUNER_TEST_PG_URL (.ci/run starts one with scripts/dev-postgres). In CI (CI set,
or TUNER_REQUIRE_PG=1) a missing server is a failure; locally these tests skip with the reason.
"""
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import optuna
import pytest
from optuna.trial import TrialState

from tuner.cli.demo import write_demo_model
from tuner.inputs.space import SPACES_DIR, load_space
from tuner.measure.machine import machine_id
from tuner.run.claims import budget_counts
from tuner.run.join import this_machine

SMALL_SPACE = open(os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")).read()
PG_ENV = "TUNER_TEST_PG_URL"
REQUIRED = bool(os.environ.get("CI")) or os.environ.get("TUNER_REQUIRE_PG") == "1"


@pytest.fixture(scope="module")
def pg_url():
    url = os.environ.get(PG_ENV)
    why = None
    if not url:
        why = f"no PostgreSQL server: set {PG_ENV} (e.g. {PG_ENV}=$(scripts/dev-postgres start))"
    else:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            why = 'psycopg missing: pip install -e ".[postgres]"'
        else:
            from tuner.errors import UserError
            from tuner.store.storage import open_storage

            try:
                open_storage(url)
            except UserError as exc:
                why = str(exc)
    if why:
        if REQUIRED:
            pytest.fail(f"PostgreSQL is required here (CI / TUNER_REQUIRE_PG=1): {why}")
        pytest.skip(why)
    return url


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("pg")
    (d / "small.yaml").write_text(SMALL_SPACE)
    write_demo_model(str(d / "demo.onnx"))
    return d


def env_for(work, **extra):
    return dict(os.environ, TUNER_CACHE=str(work / "cache"), TUNER_HEARTBEAT_INTERVAL="1", TUNER_GRACE_PERIOD="4",
                **extra)


def tuner(work, *args, timeout=300, env=None):
    return subprocess.run([sys.executable, "-m", "tuner.cli.main", *args], cwd=work, env=env_for(work, **(env or {})),
                          capture_output=True, text=True, timeout=timeout)


def worker_proc(work, url, study, *extra, log=None):
    out = open(work / f"{log or uuid.uuid4().hex}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "tuner.cli.main", "worker", "--study", study, "--storage", url, "--quiet",
                             "--max-timing-s", "0.5", *extra], cwd=work, env=env_for(work), stdout=out, stderr=out)


def create_study(work, url, study, max_trials, *extra, env=None):
    """The study and its baseline (trial 0), made by `tuner tune` with a study-wide budget."""
    r = tuner(work, "tune", str(work / "demo.onnx"), "--study", study, "--storage", url, "--space", "small.yaml",
              "--shape", "x=2x64x256", "--require", "cos<=0.005", "--max-timing-s", "0.5", "--quiet", "--seed", "0",
              "--max-trials", str(max_trials), "--n-trials", "1", "--no-select", *extra, env=env)
    assert r.returncode == 0, r.stderr


def load(url, study):
    return optuna.load_study(study_name=study, storage=url).get_trials(deepcopy=False)


def _name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_three_workers_finish_exactly_the_study_budget(pg_url, work):
    study, n = _name("three"), 7
    create_study(work, pg_url, study, n)
    procs = [worker_proc(work, pg_url, study, log=f"{study}-{i}") for i in range(3)]
    for i, p in enumerate(procs):
        assert p.wait(timeout=300) == 0, (work / f"{study}-{i}.log").read_text()
    trials = load(pg_url, study)
    assert sorted(t.number for t in trials) == list(range(n))  # exactly n, unique numbers
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert budget_counts(trials) == (n, 0)
    assert [t.number for t in trials if t.user_attrs.get("baseline")] == [0]
    workers = {t.user_attrs["worker"] for t in trials if "worker" in t.user_attrs}
    assert len(workers) >= 2  # the work was shared (trial 0 by tune, the rest by the workers)
    assert all(t.user_attrs["machine"] == trials[0].user_attrs["machine"] for t in trials)
    # A worker started after the budget is spent runs nothing; status reads the study.
    r = tuner(work, "worker", "--study", study, "--storage", pg_url, "--quiet")
    assert r.returncode == 0 and "0 trials run" in r.stdout and f"{n} finished" in r.stdout, r.stderr
    r = tuner(work, "status", "--study", study, "--storage", pg_url)
    assert r.returncode == 0 and f"complete {n}" in r.stdout and "trials per machine" in r.stdout, r.stdout + r.stderr


def _wait_running(url, study, proc, pid, deadline_s=240):
    """Until a trial of worker `pid` has been RUNNING for a while (in its build or timing)."""
    end, seen = time.monotonic() + deadline_s, {}
    while time.monotonic() < end:
        assert proc.poll() is None, "the worker ended before it could be killed"
        for t in load(url, study):
            if t.state == TrialState.RUNNING and t.user_attrs.get("worker", "").endswith(f":{pid}"):
                if time.monotonic() - seen.setdefault(t.number, time.monotonic()) > 0.5:
                    return t.number
        time.sleep(0.1)
    raise AssertionError("the worker never ran a trial")


def test_a_killed_worker_is_failed_after_the_grace_period_and_retried(pg_url, work):
    study, n = _name("kill"), 5
    create_study(work, pg_url, study, n)
    victim = worker_proc(work, pg_url, study, log=f"{study}-victim")
    killed = _wait_running(pg_url, study, victim, victim.pid)
    before = {t.number: t.values for t in load(pg_url, study) if t.state == TrialState.COMPLETE}
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert next(t for t in load(pg_url, study) if t.number == killed).state == TrialState.RUNNING
    survivor = worker_proc(work, pg_url, study, log=f"{study}-survivor")
    assert survivor.wait(timeout=300) == 0, (work / f"{study}-survivor.log").read_text()
    trials = load(pg_url, study)
    by_number = {t.number: t for t in trials}
    assert len(by_number) == len(trials)
    assert by_number[killed].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].params == by_number[killed].params
    assert {k: by_number[k].values for k in before} == before  # no completed trial lost or changed
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert budget_counts(trials) == (n, 0)  # the killed trial is replaced by its retry, not counted twice
    assert len(trials) == n + 1


def test_a_worker_with_another_model_or_machine_is_refused(pg_url, work):
    study = _name("refuse")
    # made on "another machine": one that looks alike but carries another TUNER_MACHINE_TAG
    create_study(work, pg_url, study, 3, env={"TUNER_MACHINE_TAG": "the-other-one"})
    other = write_demo_model(str(work / "other.onnx"), outliers=1)
    r = tuner(work, "worker", "--study", study, "--storage", pg_url, "--model", other, "--n-trials", "1")
    assert r.returncode == 2 and "refusing to join" in r.stderr and "model_hash" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    # The same content under another path is fine (another host's layout).
    moved = work / "moved.onnx"
    moved.write_bytes((work / "demo.onnx").read_bytes())
    # The study was timed on another machine: refused, unless --allow-other-machine.
    r = tuner(work, "worker", "--study", study, "--storage", pg_url, "--n-trials", "1")
    assert r.returncode == 2 and "another machine" in r.stderr and "--allow-other-machine" in r.stderr, r.stderr
    r = tuner(work, "worker", "--study", study, "--storage", pg_url, "--model", str(moved), "--allow-other-machine",
              "--quiet", "--max-timing-s", "0.5")
    assert r.returncode == 0, r.stderr
    trials = load(pg_url, study)
    here = machine_id(this_machine(load_space(str(work / "small.yaml"))))  # the study's space: its backends' versions
    mine = [t for t in trials if t.user_attrs.get("baseline_machine") == here]
    assert len(mine) == 1 and mine[0].state == TrialState.COMPLETE and mine[0].params == trials[0].params
    assert "reused_from" not in mine[0].user_attrs  # timed here, not copied from the other machine's baseline
    assert budget_counts(trials) == (3, 0)


def test_migrate_sqlite_to_postgres_keeps_everything(pg_url, work):
    study = _name("mig")
    sqlite = f"sqlite:///{work}/{study}.db"
    r = tuner(work, "tune", str(work / "demo.onnx"), "--study", study, "--storage", sqlite, "--space", "small.yaml",
              "--shape", "x=2x64x256", "--require", "cos<=0.005", "--max-timing-s", "0.5", "--quiet", "--seed", "0",
              "--n-trials", "2", "--top-k", "1", "--enqueue", "precision=int8-dynamic")
    assert r.returncode == 0, r.stderr
    r = tuner(work, "migrate", "--from", sqlite, "--to", pg_url, "--study", study)
    assert r.returncode == 0 and f"copied study {study}: 2 trials" in r.stdout, r.stderr
    src = optuna.load_study(study_name=study, storage=sqlite)
    dst = optuna.load_study(study_name=study, storage=pg_url)
    assert dst.user_attrs == src.user_attrs and "winner" in dst.user_attrs and "tuner_settings" in dst.user_attrs
    assert dst.directions == src.directions
    assert len(dst.trials) == len(src.trials) == 2
    for a, b in zip(src.trials, dst.trials):
        assert (a.number, a.state, a.values, a.params) == (b.number, b.state, b.values, b.params)
        assert a.user_attrs == b.user_attrs and a.system_attrs == b.system_attrs
        assert a.constraints == b.constraints and set(a.constraints) == {"cos<=0.005"}
    # Again: refused, nothing doubled.
    r = tuner(work, "migrate", "--from", sqlite, "--to", pg_url, "--study", study)
    assert r.returncode == 2 and "already exists" in r.stderr
    # Export rebuilds the winner from the stored config, here from PostgreSQL.
    r = tuner(work, "export", "--study", study, "--storage", pg_url, "--out", str(work / f"{study}-out"))
    assert r.returncode == 0 and "holds on the rebuilt engine" in r.stdout, r.stdout + r.stderr
    assert (work / f"{study}-out" / "engine" / "model.onnx").is_file()


def _refused_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


@pytest.mark.parametrize("command", [["status", "--study", "x"], ["worker", "--study", "x"],
                                     ["tune", "MODEL", "--study", "x", "--n-trials", "1", "--shape", "x=2x64x256"]])
def test_unreachable_server_is_one_line(work, command):
    if REQUIRED:
        import psycopg  # noqa: F401  where PostgreSQL is required, a missing driver fails here
    else:
        pytest.importorskip("psycopg", reason='pip install -e ".[postgres]"')
    port = _refused_port()
    url = f"postgresql+psycopg://u:p@127.0.0.1:{port}/db"
    command = [str(work / "demo.onnx") if a == "MODEL" else a for a in command]
    r = tuner(work, *command, "--storage", url, timeout=60)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"127.0.0.1:{port}" in err and "check that the server runs" in err, err
    if command[0] != "status":
        return
    r = tuner(work, "migrate", "--from", f"sqlite:///{work}/none.db", "--to", url, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "no such file" in r.stderr
    assert not (work / "none.db").exists()  # a misspelt source is not created
    optuna.create_study(study_name="m", storage=f"sqlite:///{work}/some.db")
    r = tuner(work, "migrate", "--from", f"sqlite:///{work}/some.db", "--to", url, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and f"127.0.0.1:{port}" in r.stderr


STATIC_SPACE = """\
name: static
backend: onnxruntime
parameters:
  precision: {type: categorical, choices: [fp32, int8-static], default: fp32}
"""


def test_calibration_ranges_are_stored_in_the_study_and_reused(work, tmp_path, demo_path):
    """Needs no server: the study (SQLite here) carries the ranges to every worker's cache."""
    from tuner.measure.latency import LatencyProtocol
    from tuner.run.claims import CALIB_PREFIX, download_calibration
    from tuner.run.options import TuneOptions
    from tuner.run.tune import tune_study
    from tuner.store import cache

    (tmp_path / "static.yaml").write_text(STATIC_SPACE)
    result = tune_study(TuneOptions.of(study="c", model=demo_path, storage=f"sqlite:///{tmp_path}/c.db",
                              space=str(tmp_path / "static.yaml"),
                              shapes=["x=2x64x256"], seed=0, n_trials=2, enqueue=["precision=int8-static"], select=False,
                              protocol=LatencyProtocol(warmup=1, min_runs=3, max_runs=8, max_seconds=1), progress=False,
                              quiet=True))
    assert result.study.trials[1].params["precision"] == "int8-static"
    stored = {k: v for k, v in result.study.user_attrs.items() if k.startswith(CALIB_PREFIX)}
    assert len(stored) == 1
    (key, text), = stored.items()
    path = cache.cache_path(key[len(CALIB_PREFIX):])
    assert open(path).read() == text
    os.remove(path)  # another host: an empty cache
    download_calibration(result.study.user_attrs)
    assert open(path).read() == text


def test_read_only_commands_add_no_tables_to_another_database(pg_url, work):
    """status, studies, select, export, report and migrate --from on a database without Optuna's tables
    refuse in one line and leave it as it was (RDBStorage would create 13 tables)."""
    import psycopg

    name = f"app_{uuid.uuid4().hex[:8]}"
    plain = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as con:
        con.execute(f"CREATE DATABASE {name}")
    app = pg_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(app.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as con:
        con.execute("CREATE TABLE users (id serial PRIMARY KEY, name text)")

    def tables():
        with psycopg.connect(app.replace("postgresql+psycopg://", "postgresql://")) as con:
            return sorted(r[0] for r in con.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))

    for command in (["status", "--study", "s"], ["studies"], ["select", "--study", "s"],
                    ["export", "--study", "s", "--out", "w"], ["report", "--study", "s", "--out", "r.html"],
                    ["migrate", "--to", f"sqlite:///{work}/copy.db"]):
        flag = "--from" if command[0] == "migrate" else "--storage"
        r = tuner(work, *command, flag, app, timeout=60)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "has no Optuna tables (not an Optuna study database); nothing was changed" in r.stderr
        assert tables() == ["users"]
    assert not (work / "copy.db").exists() and not (work / "w").exists()


def test_a_trials_record_written_at_once_reads_back_as_optunas_calls_wrote_it(pg_url):
    """tuner.search.attrs on PostgreSQL: one multi-row upsert per table, the same rows Optuna's calls make."""
    from tuner.search.attrs import write_trial

    attrs = {"latency": {"median_ms": 1.5}, "metrics": {"cos": 0.001}, "n": 3}
    bounds = {"cos<=0.005": -0.004, "build": 1.0}
    ours = optuna.create_study(study_name=f"attrs-{uuid.uuid4().hex[:8]}", storage=pg_url)
    theirs = optuna.create_study(study_name=f"attrs-{uuid.uuid4().hex[:8]}", storage=pg_url)
    a, b = ours.ask(), theirs.ask()
    write_trial(a, attrs, bounds)
    write_trial(a, {"n": 4})  # an upsert: the later value wins
    for key, value in (attrs | {"n": 4}).items():
        b.set_user_attr(key, value)
    for bound, value in bounds.items():
        b.set_constraint(bound, value)
    ours.tell(a, 1.0)
    theirs.tell(b, 1.0)
    got, want = optuna.load_study(study_name=ours.study_name, storage=pg_url).trials[0], theirs.trials[0]
    assert got.user_attrs == want.user_attrs and got.system_attrs == want.system_attrs and got.constraints == bounds
