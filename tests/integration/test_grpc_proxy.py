"""Many workers through `tuner proxy` (Optuna's gRPC storage proxy) in front of the test PostgreSQL.

The server comes from TUNER_TEST_PG_URL as in test_postgres.py (skipped locally without one, required in
CI). The tests without a server still need grpcio (the `postgres` extra).
"""
import contextlib
import glob
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import optuna
import pytest
import test_postgres as pg  # the PostgreSQL tests' server fixture and helpers
from optuna.trial import TrialState

from tuner.errors import UserError
from tuner.run.claims import ClaimLock, budget_counts
from tuner.store.proxy_client import ProxyClaimLock

pg_url, work = pg.pg_url, pg.work  # their fixtures, used here under the same names


@pytest.fixture(scope="module", autouse=True)
def _grpcio():
    if pg.REQUIRED:
        import grpc  # noqa: F401  where PostgreSQL is required, a missing grpcio fails here
    else:
        pytest.importorskip("grpc", reason='grpcio missing: pip install -e ".[postgres]"')


def _start_proxy(work, db_url, port=0):
    """A `tuner proxy` process on 127.0.0.1 (port 0: a free one), its grpc:// URL and its stderr file."""
    err = open(work / f"proxy-{uuid.uuid4().hex[:6]}.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "tuner.cli.main", "proxy", "--storage", db_url, "--host", "127.0.0.1",
                             "--port", str(port)], cwd=work, env=pg.env_for(work), stdout=subprocess.PIPE, stderr=err,
                            text=True)
    try:
        ready = select.select([proc.stdout], [], [], 120)[0]
        line = proc.stdout.readline() if ready else ""
        m = re.search(r"--storage (grpc://127\.0\.0\.1:\d+) ", line)
        assert m, f"the proxy did not start: {line!r} {err.seek(0) or err.read()}"
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, m.group(1), err


@contextlib.contextmanager
def running_proxy(work, db_url, port=0):
    """`tuner proxy` on 127.0.0.1; yields its grpc:// URL; at the end SIGTERM must stop it cleanly."""
    proc, url, err = _start_proxy(work, db_url, port)
    try:
        yield url
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        err.seek(0)
        assert proc.returncode == 0 and "tuner proxy: stopped" in out and "Traceback" not in err.read(), out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _first_killable(url, study, procs, deadline_s=240):
    """(worker, trial number) for the first trial that has been RUNNING for a while in one of procs."""
    by_pid = {p.pid: p for p in procs}
    end, seen = time.monotonic() + deadline_s, {}
    while time.monotonic() < end:
        for t in pg.load(url, study):
            pid = int(t.user_attrs.get("worker", ":0").rsplit(":", 1)[1])
            if t.state == TrialState.RUNNING and pid in by_pid and by_pid[pid].poll() is None:
                if time.monotonic() - seen.setdefault(t.number, time.monotonic()) > 0.5:
                    return by_pid[pid], t.number
        time.sleep(0.1)
    raise AssertionError("no worker ran a trial")


def test_four_workers_through_the_proxy_spend_the_budget_exactly_despite_a_kill(pg_url, work):
    study, n = pg._name("proxy"), 6
    with running_proxy(work, pg_url) as url:
        r = pg.tuner(work, "tune", str(work / "demo.onnx"), "--study", study, "--storage", url, "--space", "small.yaml",
                     "--shape", "x=2x64x256", "--require", "cos<=0.005", "--max-timing-s", "0.3", "--quiet", "--seed", "0",
                     "--max-trials", str(n), "--n-trials", "1", "--no-select")
        assert r.returncode == 0, r.stderr
        procs = [pg.worker_proc(work, url, study, "--max-timing-s", "0.3", log=f"{study}-{i}") for i in range(4)]
        victim, killed = _first_killable(pg_url, study, procs)
        victim.send_signal(signal.SIGKILL)  # mid-trial: its heartbeats through the proxy stop
        victim.wait()
        for i, p in enumerate(procs):
            if p is not victim:
                assert p.wait(timeout=300) == 0, (work / f"{study}-{i}.log").read_text()
        r = pg.tuner(work, "status", "--study", study, "--storage", url)
        assert r.returncode == 0 and f"complete {n}" in r.stdout, r.stdout + r.stderr
    trials = pg.load(pg_url, study)
    by_number = {t.number: t for t in trials}
    assert sorted(by_number) == list(range(n + 1))  # the budget and the one retry, unique numbers
    assert by_number[killed].state == TrialState.FAIL  # failed after the grace period, not RUNNING forever
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE and retries[0].params == by_number[killed].params
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert budget_counts(trials) == (n, 0)
    workers = {t.user_attrs["worker"] for t in trials if "worker" in t.user_attrs}
    assert len(workers) >= 3  # tune's baseline, the victim and at least one survivor
    windows = sorted(t.user_attrs["timing_window"] for t in trials if "timing_window" in t.user_attrs)
    for (_, end), (start, _) in zip(windows, windows[1:]):
        assert end <= start, f"two candidates were timed at once: {windows}"


def test_the_claim_lock_is_the_databases_and_dies_with_its_holder(pg_url, work):
    """A worker holding the claim lock through the proxy holds PostgreSQL's advisory lock (workers on the
    database directly wait for it); SIGKILLed, it lets go of it."""
    import psycopg

    study = pg._name("lock")
    with running_proxy(work, pg_url) as url:
        holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom tuner.store.proxy_client import ProxyClaimLock\n"
                                   f"ProxyClaimLock({url!r}, {study!r}).acquire()\nprint('held', flush=True)\ntime.sleep(300)"],
                                  cwd=work, env=pg.env_for(work), stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            key = ClaimLock(pg_url, study)._key
            with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as con:
                assert con.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0] is False
                holder.send_signal(signal.SIGKILL)
                holder.wait()
                got = threading.Event()
                lock = ProxyClaimLock(url, study)
                t = threading.Thread(target=lambda: (lock.acquire(), got.set()), daemon=True)
                t.start()
                assert got.wait(30), "the dead holder's lock was never released"
                assert con.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0] is False
                lock.close()
                end = time.monotonic() + 10
                while not con.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                    assert time.monotonic() < end, "release() did not free the database lock"
                    time.sleep(0.1)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()


def _descendants(pid):
    """The processes below pid (its trial child, multiprocessing's helpers), from /proc."""
    children = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended (its reaper may be slow)
    except OSError:
        return False


# A user metric that stalls one trial, the second it measures, for 10 s in its accuracy check, after saying so
# in a file of the working folder: the trial is provably in flight when the proxy dies (and ends after it).
STALL_METRIC = """\
import os, time

def stall(outputs, refs, inputs):
    if not os.path.exists("measured-once"):
        open("measured-once", "w").close()
    elif not os.path.exists("stalled"):
        open("stalled", "w").close()
        time.sleep(10)
    return 0.0
"""


def test_a_worker_that_loses_its_proxy_ends_in_one_line_and_its_trial_is_retried_later(pg_url, work):
    """The proxy SIGKILLed under a worker mid-trial: the worker exits 2 with one line, no traceback, no process
    left; its trial stays RUNNING, and once the proxy and a worker are back it is failed and retried once."""
    study = pg._name("lost")
    (work / "stallmetric.py").write_text(STALL_METRIC)
    for marker in ("measured-once", "stalled"):
        (work / marker).unlink(missing_ok=True)
    proxy, url, _ = _start_proxy(work, pg_url)
    where = url[len("grpc://"):]
    try:
        r = pg.tuner(work, "tune", str(work / "demo.onnx"), "--study", study, "--storage", url, "--space", "small.yaml",
                     "--shape", "x=2x64x256", "--require", "cos<=0.005,stallmetric:stall<=1", "--max-timing-s", "0.3",
                     "--quiet", "--seed", "0", "--max-trials", "50", "--n-trials", "1", "--no-select")
        assert r.returncode == 0, r.stderr
        worker = pg.worker_proc(work, url, study, "--allow-metric", "stallmetric:stall", log=f"{study}-w")
        try:
            end = time.monotonic() + 240
            while not (work / "stalled").exists():  # the worker's first trial, in its accuracy check
                assert worker.poll() is None and time.monotonic() < end, (work / f"{study}-w.log").read_text()
                time.sleep(0.1)
            running, = [t.number for t in pg.load(pg_url, study) if t.state == TrialState.RUNNING]
            below = _descendants(worker.pid)
            proxy.kill()  # SIGKILL: no goodbye to its workers
            proxy.wait()
            killed_at = time.monotonic()
            assert worker.wait(timeout=120) == 2, (work / f"{study}-w.log").read_text()
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
    log = (work / f"{study}-w.log").read_text()  # its stdout and stderr
    assert "Traceback" not in log, log
    errors = [line for line in log.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith(f"tuner: error: lost the storage proxy at {where} ("), log
    assert "stays RUNNING" in errors[0] and "grace period (4 s)" in errors[0], errors[0]
    assert errors[0].endswith("start the worker again once the proxy is back"), errors[0]
    end = time.monotonic() + 10
    while [p for p in below if _alive(p)] and time.monotonic() < end:
        time.sleep(0.2)
    assert not [p for p in below if _alive(p)], f"left running: {below}"
    stale = [t.number for t in pg.load(pg_url, study) if t.state == TrialState.RUNNING]
    assert stale == [running], stale  # the trial in flight: its end never reached the storage
    # No proxy there at start: one line too.
    r = pg.tuner(work, "worker", "--study", study, "--storage", url, "--quiet", timeout=60)
    err = r.stderr.strip()
    assert r.returncode == 2 and err.splitlines() == [err] and f"no tuner proxy answers at {where}" in err, err
    # The proxy back on its port, a worker again: the stale trial is failed and retried once (grace 4 s).
    time.sleep(max(0.0, killed_at + 5 - time.monotonic()))
    with running_proxy(work, pg_url, port=int(where.rsplit(":", 1)[1])) as again:
        assert again == url
        r = pg.tuner(work, "worker", "--study", study, "--storage", url, "--quiet", "--max-timing-s", "0.3",
                     "--n-trials", "1", "--allow-metric", "stallmetric:stall")
        assert r.returncode == 0 and "1 trials run" in r.stdout, r.stdout + r.stderr
    trials = pg.load(pg_url, study)
    assert not [t for t in trials if t.state == TrialState.RUNNING], [(t.number, t.state) for t in trials]
    assert {t.number: t.state for t in trials}[running] == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == running]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE, retries


def _refused_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_no_proxy_answering_and_a_plain_optuna_proxy_are_one_line(work):
    port = _refused_port()
    r = pg.tuner(work, "status", "--study", "x", "--storage", f"grpc://127.0.0.1:{port}", timeout=60)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"no tuner proxy answers at 127.0.0.1:{port}" in err and "tuner proxy --storage" in err, err
    r = pg.tuner(work, "proxy", "--storage", f"sqlite:///{work}/p.db", timeout=60)
    assert r.returncode == 2 and "in front of a database server" in r.stderr and not (work / "p.db").exists()
    # Optuna's own proxy has no heartbeats and no claim lock: refused, nothing written through it.
    from optuna.storages._grpc.server import make_server

    from tuner.store.storage import open_storage

    memory = optuna.storages.InMemoryStorage()
    server = make_server(memory, "127.0.0.1", port)
    server.start()
    try:
        with pytest.raises(UserError, match="is not a `tuner proxy`"):
            open_storage(f"grpc://127.0.0.1:{port}", create=False)
    finally:
        server.stop(0)
    assert memory.get_all_studies() == []
