"""Storages: read-only commands write nothing, study names stay inside studies/, a missing driver says what to install."""
import hashlib
import os
import sqlite3
import subprocess
import sys

import optuna
import pytest

from tuner.cli.main import main


def _files(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("argv", [
    ["status", "--study", "bertt"],
    ["export", "--study", "bertt", "--out", "w"],
    ["select", "--study", "bertt"],
    ["report", "--study", "bertt", "--out", "r.html"],
    ["studies", "--storage", "sqlite:///studeis/bert.db"],
    ["studies", "--storage", "journal:///studeis/bert.log"],
    ["migrate", "--from", "sqlite:///studeis/bert.db", "--to", "sqlite:///copy.db"],
])
def test_a_misspelt_study_or_path_creates_nothing(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "no study 'bertt'" in err or "no such file studeis/bert" in err
    assert argv[0] != "migrate" or err.startswith("tuner: error: --from ")
    assert _files(tmp_path) == set()


def test_a_misspelt_study_in_an_existing_file_adds_no_study(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("studies")
    optuna.create_study(study_name="bert", storage="sqlite:///studies/all.db")
    url = "sqlite:///studies/all.db"
    for argv in (["status"], ["select"], ["export", "--out", "w"], ["report", "--out", "r.html"]):
        assert main(argv + ["--study", "bertt", "--storage", url]) == 2
        assert "no study 'bertt' in sqlite:///studies/all.db" in capsys.readouterr().err
    assert [s.study_name for s in optuna.get_all_study_summaries(url)] == ["bert"]
    assert not os.path.exists("w") and not os.path.exists("r.html")


@pytest.mark.parametrize("argv", [
    ["status", "--study", "s"], ["select", "--study", "s"], ["export", "--study", "s", "--out", "w"],
    ["report", "--study", "s", "--out", "r.html"], ["studies"], ["migrate", "--to", "sqlite:///copy.db"],
])
def test_another_applications_sqlite_file_is_refused_unchanged(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    con = sqlite3.connect("app.db")
    con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO users (name) VALUES ('ada')")
    con.commit()
    con.close()
    before = _sha("app.db")
    flag = "--from" if argv[0] == "migrate" else "--storage"
    assert main(argv + [flag, "sqlite:///app.db"]) == 2
    err = capsys.readouterr().err
    assert f"{flag} sqlite:///app.db: app.db is not an Optuna study database; nothing was changed" in err
    assert _sha("app.db") == before and _files(tmp_path) == {"app.db"}
    con = sqlite3.connect("file:app.db?mode=ro", uri=True)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["users"]
    con.close()


@pytest.mark.parametrize("name", ["../escape", "a/b", "/tmp/x", "..", ".hidden", "", "x" * 101])
def test_a_study_name_cannot_leave_studies(name, tmp_path, capsys, monkeypatch, demo_path):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for argv in (["tune", demo_path, "--study", name, "--shape", "x=8x64x256", "--n-trials", "1"],
                 ["tune", demo_path, "--study", name, "--storage", "sqlite:///s.db", "--n-trials", "1"],
                 ["status", "--study", name], ["export", "--study", name, "--out", "w"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "a study name is up to 100 letters" in err and err.count("\n") == 1
    assert _files(tmp_path) == set()


def test_studies_lists_the_demo_study_too(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("studies")
    os.mkdir("tuner-demo")
    optuna.create_study(study_name="demo", storage="sqlite:///tuner-demo/demo.db")
    optuna.create_study(study_name="mine", storage="sqlite:///studies/mine.db")
    assert main(["studies"]) == 0
    out = capsys.readouterr().out
    assert "demo " in out and "[sqlite:///tuner-demo/demo.db]" in out and "mine " in out


# psycopg made unimportable, as on a machine without the extra: SQLAlchemy's dialect import fails
# inside Optuna's RDBStorage, which re-raises it as an ImportError of its own.
_NO_PSYCOPG = ("import sys; sys.modules['psycopg'] = None; sys.modules['psycopg2'] = None; "
               "from tuner.cli.main import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.parametrize("argv", [["studies"], ["status", "--study", "s"], ["migrate", "--to", "sqlite:///c.db"]])
def test_a_missing_postgres_driver_says_what_to_install(argv, tmp_path):
    flag = "--from" if argv[0] == "migrate" else "--storage"
    url = "postgresql+psycopg://tuner:pw@127.0.0.1:9/tuner"
    r = subprocess.run([sys.executable, "-c", _NO_PSYCOPG, *argv, flag, url], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    assert 'pip install "engine-tuner[postgres]"' in r.stderr and "psycopg" in r.stderr
    assert "cannot reach" not in r.stderr and r.stderr.count("\n") == 1


def _open_at(path, start, results):
    from tuner.store.storage import open_storage

    start.wait()
    try:
        open_storage(f"sqlite:///{path}")
        results.put("ok")
    except BaseException as exc:  # report it to the parent, whatever it is
        results.put(f"{type(exc).__name__}: {exc}")


def test_processes_starting_on_one_new_sqlite_file_all_open_it(tmp_path):
    # Optuna's table creation is check-then-create: unserialized, 4 processes on a new file failed
    # here in 11 rounds out of 15 ("table studies already exists", "UNIQUE constraint failed").
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    for round_ in range(5):
        path = tmp_path / f"new{round_}.db"
        start, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_open_at, args=(path, start, results)) for _ in range(4)]
        for p in procs:
            p.start()
        start.set()
        outcomes = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        assert outcomes == ["ok"] * 4, outcomes
        assert len(optuna.storages.RDBStorage(f"sqlite:///{path}", skip_table_creation=True).get_all_studies()) == 0


def test_a_file_whose_schema_is_half_made_is_opened_after_its_creator_is_done(tmp_path):
    """RDBStorage creates Optuna's tables, then stamps their alembic revision: a second process that opened
    the file in between stamped it too, and the creator died on alembic_version's unique key (seen in CI: a
    test polling a study being created). Such a file is opened under the creator's directory lock."""
    import threading

    from tuner.store.locks import directory_lock
    from tuner.store.storage import _optuna_schema_done, open_for_reading, open_storage

    path = tmp_path / "s.db"
    assert not _optuna_schema_done(str(path))
    open_storage(f"sqlite:///{path}")
    assert _optuna_schema_done(str(path))
    for opener_of in (open_storage, open_for_reading):  # a tune or a worker; status, report, a test's poll
        with sqlite3.connect(path) as con:  # the moment between the creator's tables and its stamp
            con.execute("DELETE FROM alembic_version")
        assert not _optuna_schema_done(str(path))
        opened = threading.Event()
        with directory_lock(str(tmp_path)):  # a creator at work
            opener = threading.Thread(target=lambda f=opener_of, done=opened: (f(f"sqlite:///{path}"), done.set()))
            opener.start()
            assert not opened.wait(0.5), opener_of  # it waits for the creator, not stamps beside it
        opener.join(60)
        assert opened.is_set() and _optuna_schema_done(str(path))
        with sqlite3.connect(path) as con:
            assert con.execute("SELECT COUNT(*) FROM alembic_version").fetchone()[0] == 1
