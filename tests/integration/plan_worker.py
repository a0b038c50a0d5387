"""One worker process of test_plan_samplers: joins the study and runs its plan sampler until exhausted.

argv: storage kind (optuna|tuner), SQLite path, strategy, barrier folder and worker count (each worker
writes a file there and begins once all have: they start together however slowly each one imports; and each
finishes its first trial only once every worker holds one, so that each runs some on a loaded machine too),
objective sleep in seconds.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: plan_spaces

import optuna  # noqa: E402
from plan_spaces import parallel_params, space_of, synthetic_objective  # noqa: E402

from tuner.search.plan_samplers import make_plan_sampler  # noqa: E402
from tuner.store.storage import open_storage  # noqa: E402


def storage(kind: str, path: str) -> optuna.storages.BaseStorage:
    """Optuna's SQLite storage as it comes (60 s busy timeout), or the tuner's (WAL, BEGIN IMMEDIATE)."""
    if kind == "tuner":
        return open_storage(f"sqlite:///{path}")
    return optuna.storages.RDBStorage(f"sqlite:///{path}", engine_kwargs={"connect_args": {"timeout": 60}})


def main() -> None:
    kind, path, strategy, barrier, workers, sleep_s = (sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4],
                                                       int(sys.argv[5]), float(sys.argv[6]))
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    params = parallel_params(strategy)
    sampler = make_plan_sampler(strategy, params, defaults={"keep_float/top_k": 3})
    study = optuna.load_study(study_name="p", storage=storage(kind, path), sampler=sampler)
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 240
    while sum(not n.startswith("first-") for n in os.listdir(barrier)) < workers and time.monotonic() < deadline:
        time.sleep(0.01)
    objective = synthetic_objective(space_of(params), sleep_s)
    held = []  # this worker's first trial has begun

    def tagged(trial: optuna.Trial) -> float:
        trial.set_user_attr("pid", os.getpid())
        if not held:  # every worker holds a plan before any finishes one: all contend, however slowly each starts
            held.append(trial.number)
            open(os.path.join(barrier, f"first-{os.getpid()}"), "w").close()
            deadline = time.monotonic() + 240
            while sum(n.startswith("first-") for n in os.listdir(barrier)) < workers and time.monotonic() < deadline:
                time.sleep(0.01)
        return objective(trial)

    study.optimize(tagged, n_trials=1000)
    print(f"contested={sampler.contested}")


if __name__ == "__main__":
    main()
