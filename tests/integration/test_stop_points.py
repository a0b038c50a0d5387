"""A stop never lands inside a storage write (issue 43): the real `tuner tune` over the clockwork backend on a
real SQLite study, run as this file (a script), signals itself from inside the storage: at the Nth commit of
any SQLAlchemy session (every write Optuna and the tuner make), or at the Nth call of Optuna's
`set_trial_state_values` (its tell: before the gate, Ctrl-C there left a RUNNING trial and a traceback,
UnboundLocalError: updated_state) or `_create_new_trial` (its ask, and each trial queued). A first run counts
the calls; the signal points are then spread over all of them, SIGINT and SIGTERM in turn. Every run ends 130 or 143 as its
signal says, with no traceback, and leaves no trial RUNNING."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import optuna
import pytest
from optuna.trial import TrialState

HOOKED = ("commit", "set_trial_state_values", "_create_new_trial")
MAX_TRIALS = 4
COMMIT_POINTS = 10  # spread over the run's commits: set-up, the defaults, the search's trials


def _run(tmp_path, env: dict, db: str, point: str, n: int, sig: int) -> subprocess.CompletedProcess:
    import fixture_backends

    folder = tmp_path / f"{db}.builds"
    folder.mkdir(exist_ok=True)
    env = env | {"CLOCKWORK_DIR": str(folder), "TUNER_CACHE": str(tmp_path / "cache"),
                 "COUNTS": str(tmp_path / f"{db}.counts.json")}
    return subprocess.run([sys.executable, __file__, point, str(n), str(int(sig)),
                           *fixture_backends.clockwork_tune_args(tmp_path, db, MAX_TRIALS)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.timeout(1200)
def test_a_signal_at_any_storage_write_ends_the_run_cleanly(tmp_path):
    import fixture_backends

    env = fixture_backends.clockwork_study(tmp_path)
    counted = _run(tmp_path, env, "count.db", "none", 0, 0)
    assert counted.returncode == 0, counted.stderr[-3000:]
    counts = json.loads((tmp_path / "count.db.counts.json").read_text())
    assert counts["set_trial_state_values"] >= MAX_TRIALS and counts["_create_new_trial"] >= MAX_TRIALS, counts
    assert counts["commit"] > 3 * COMMIT_POINTS, counts
    points = [("commit", 1 + i * (counts["commit"] - 1) // (COMMIT_POINTS - 1)) for i in range(COMMIT_POINTS)]
    points += [("set_trial_state_values", n) for n in (1, counts["set_trial_state_values"])]
    points += [("_create_new_trial", n) for n in (1, counts["_create_new_trial"])]
    for i, (point, n) in enumerate(points):
        sig = (signal.SIGINT, signal.SIGTERM)[i % 2]
        db = f"{point}-{n}.db"
        r = _run(tmp_path, env, db, point, n, sig)
        where = f"signal {sig.name} at {point} #{n}"
        assert "Traceback" not in r.stderr, f"{where}:\n{r.stderr[-3000:]}"
        assert r.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], f"{where}: exit {r.returncode}\n{r.stderr[-3000:]}"
        if os.path.exists(tmp_path / db) and optuna.get_all_study_names(f"sqlite:///{tmp_path / db}"):
            study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / db}")
            running = [t.number for t in study.get_trials(deepcopy=False) if t.state == TrialState.RUNNING]
            assert not running, f"{where}: trials {running} left RUNNING"


if __name__ == "__main__":
    import sqlalchemy.orm
    from optuna.storages import RDBStorage

    from tuner.cli.main import main

    point, n, signum = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    counts = dict.fromkeys(HOOKED, 0)

    def hooked(owner, name):
        real = getattr(owner, name)

        def call(*args, **kwargs):
            counts[name] += 1
            if name == point and counts[name] == n:
                os.kill(os.getpid(), signum)  # its handler runs here, inside the write's caller
            return real(*args, **kwargs)

        setattr(owner, name, call)

    hooked(sqlalchemy.orm.Session, "commit")
    hooked(RDBStorage, "set_trial_state_values")
    hooked(RDBStorage, "_create_new_trial")  # ask and enqueue (through Optuna's cache)
    try:
        code = main(sys.argv[4:])
    finally:
        with open(os.environ["COUNTS"], "w") as f:
            json.dump(counts, f)
    sys.exit(code)
