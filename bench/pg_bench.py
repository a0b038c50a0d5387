"""Issue 8: what PostgreSQL costs and what a second worker buys. Prints figures; asserts nothing.

  python bench/pg_bench.py                       # PostgreSQL from TUNER_TEST_PG_URL, else scripts/dev-postgres
  python bench/pg_bench.py --pg URL --trials 1000 --real-trials 12

1. Storage overhead per trial at --trials trials, on SQLite (WAL, BEGIN IMMEDIATE), the journal file
   and PostgreSQL: the synthetic objective (bench/synthetic.py: the real space, the user attrs and
   constraint a real trial stores, no build) with the random sampler, one process, run two ways:
   plain `study.optimize(n_trials=1)` per trial (ask, tell, user attrs), and the tuner's own loop
   (the claim lock, fail_stale_trials and the study-wide budget count around each trial).
2. Throughput of 1 vs 2 `tuner worker` processes on the demo model through PostgreSQL (real builds,
   real timing; on a 2-core machine the two workers share the cores).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import optuna

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(HERE)

from synthetic import synthetic_objective  # noqa: E402

from tuner.inputs.space import SPACES_DIR  # noqa: E402

SMALL_SPACE = open(os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml")).read()


def _pg_url(given: str | None):
    if given:
        return given, False
    if os.environ.get("TUNER_TEST_PG_URL"):
        return os.environ["TUNER_TEST_PG_URL"], False
    out = subprocess.run([os.path.join(REPO, "scripts", "dev-postgres"), "start"], capture_output=True, text=True,
                         check=True, env=dict(os.environ, DEV_POSTGRES_STATE=os.path.join(tempfile.gettempdir(),
                                                                                          f"pg-bench-{os.getpid()}.state")))
    return out.stdout.strip(), True


def _stop_pg():
    subprocess.run([os.path.join(REPO, "scripts", "dev-postgres"), "stop"], capture_output=True,
                   env=dict(os.environ, DEV_POSTGRES_STATE=os.path.join(tempfile.gettempdir(), f"pg-bench-{os.getpid()}.state")))


def storage_overhead(url: str, name: str, tmp: str, model: str, n: int, mode: str) -> dict:
    from tuner.run.claims import TrialClaims
    from tuner.run.options import TuneOptions
    from tuner.run.prepare import open_study

    ctx = open_study(TuneOptions.of(study=name, model=model, storage=url, space=os.path.join(tmp, "small.yaml"),
                                 shapes=["x=2x64x256"], require="cos<=0.005", quiet=True, progress=False))
    ctx.study.sampler = optuna.samplers.RandomSampler(seed=0)
    objective = synthetic_objective(ctx)
    claims = TrialClaims(ctx) if mode == "tuner loop" else None
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        if claims is None:
            ctx.study.optimize(objective, n_trials=1, gc_after_trial=False)
        else:
            claims.acquire()
            try:
                ctx.study.optimize(claims.wrap(objective), n_trials=1, gc_after_trial=False)
            finally:
                claims.release()
        times.append(time.perf_counter() - t0)
    if claims is not None:
        claims.close()
    first, last = times[: n // 10], times[-(n // 10):]
    return {"mean_ms": 1e3 * sum(times) / n, "first_ms": 1e3 * sum(first) / len(first),
            "last_ms": 1e3 * sum(last) / len(last), "total_s": sum(times)}


def throughput(url: str, tmp: str, model: str, workers: int, n: int) -> dict:
    name = f"tp{workers}-{os.getpid()}"
    env = dict(os.environ, TUNER_CACHE=os.path.join(tmp, "cache"))
    base = [sys.executable, "-m", "tuner.cli.main"]
    subprocess.run(base + ["tune", model, "--study", name, "--storage", url, "--space", os.path.join(tmp, "small.yaml"),
                           "--shape", "x=2x64x256", "--require", "cos<=0.005", "--max-timing-s", "1", "--quiet",
                           "--seed", "0", "--max-trials", str(n), "--n-trials", "1", "--no-select"],
                   cwd=tmp, env=env, check=True, capture_output=True)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(base + ["worker", "--study", name, "--storage", url, "--quiet"], cwd=tmp, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(workers)]
    for p in procs:
        p.wait()
    wall = time.perf_counter() - t0
    trials = optuna.load_study(study_name=name, storage=url).trials[1:]  # trial 0 was tune's baseline
    built = [t for t in trials if t.state.name == "COMPLETE" and "reused_from" not in t.user_attrs]
    return {"wall_s": wall, "trials": len(trials), "built": len(built),
            "per_min": 60 * len(trials) / wall, "built_per_min": 60 * len(built) / wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pg", help="PostgreSQL URL (default TUNER_TEST_PG_URL, else a throwaway scripts/dev-postgres)")
    ap.add_argument("--trials", type=int, default=1000, help="synthetic trials per storage (default 1000)")
    ap.add_argument("--real-trials", type=int, default=13, help="demo-model trials per throughput run (default 13)")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    pg, started = _pg_url(args.pg)
    try:
        with tempfile.TemporaryDirectory(prefix="pg-bench-") as tmp:
            from tuner.cli.demo import write_demo_model

            with open(os.path.join(tmp, "small.yaml"), "w") as f:
                f.write(SMALL_SPACE)
            model = write_demo_model(os.path.join(tmp, "demo.onnx"))
            os.environ["TUNER_CACHE"] = os.path.join(tmp, "cache")
            print(f"storage overhead per trial, {args.trials} synthetic trials, one process (ms; first/last tenth)")
            for mode in ("plain optimize", "tuner loop"):
                for kind, url in (("sqlite", f"sqlite:///{tmp}/{mode[0]}.db"), ("journal", f"journal:///{tmp}/{mode[0]}.log"),
                                  ("postgresql", pg)):
                    r = storage_overhead(url, f"ovh-{mode[0]}-{os.getpid()}", tmp, model, args.trials, mode)
                    print(f"  {mode:15s} {kind:10s} mean {r['mean_ms']:7.2f}  first {r['first_ms']:7.2f}  "
                          f"last {r['last_ms']:7.2f}  total {r['total_s']:6.1f} s", flush=True)
            if not args.skip_throughput:
                print(f"\nthroughput on the demo model through PostgreSQL, {args.real_trials - 1} worker trials, "
                      f"{os.cpu_count()} cores")
                for w in (1, 2):
                    r = throughput(pg, tmp, model, w, args.real_trials)
                    print(f"  {w} worker{'s' if w > 1 else ' '}  {r['wall_s']:6.1f} s wall (incl. start-up)  "
                          f"{r['per_min']:5.1f} trials/min  ({r['built']} built, {r['built_per_min']:5.1f} built/min)",
                          flush=True)
    finally:
        if started:
            _stop_pg()


if __name__ == "__main__":
    main()
