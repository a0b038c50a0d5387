"""Workers killed again and again on one shared study (issue 43): PostgreSQL directly, and through `tuner proxy`
(whose own process is killed once and restarted). Prints figures; asserts nothing (each check is a column).

  python bench/kill_loop_bench.py                     # both; PostgreSQL from TUNER_TEST_PG_URL, else scripts/dev-postgres
  python bench/kill_loop_bench.py --through proxy --kills 20 --workers 3 --trials 40

Each run: `tuner tune` makes the study (demo model, onnxruntime-cpu-small, --max-trials TRIALS) and runs its
baseline; WORKERS `tuner worker` processes share it; every 1-4 s (random, seeded) one live worker gets SIGKILL
and a fresh one takes its place, KILLS times; then the workers run the budget out. Heartbeats every second, a
4 s grace period (TUNER_HEARTBEAT_INTERVAL, TUNER_GRACE_PERIOD), so a killed worker's trial is failed and retried.
Checked at the end, after the grace period: every trial ever seen COMPLETE still is (none lost), none RUNNING or
WAITING, the study-wide budget spent exactly (finished == TRIALS, retries not counted twice), trial numbers
unique, and no process of the run left (workers, their trial children and engine processes, the proxy).
"""
from __future__ import annotations

import argparse
import os
import random
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

import optuna
import psutil
from optuna.trial import TrialState

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pg_bench import _pg_url, _stop_pg  # noqa: E402

from tuner.cli.demo import write_demo_model  # noqa: E402
from tuner.inputs.space import SPACES_DIR  # noqa: E402
from tuner.run.claims import budget_counts  # noqa: E402


def _env(work: str) -> dict:
    return os.environ | {"TUNER_CACHE": os.path.join(work, "cache"), "TUNER_HEARTBEAT_INTERVAL": "1",
                         "TUNER_GRACE_PERIOD": "4"}


def _tuner(work: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli.main", *args], cwd=work, env=_env(work),
                          capture_output=True, text=True, timeout=600)


def _worker(work: str, url: str, study: str, i: int) -> subprocess.Popen:
    log = open(os.path.join(work, f"{study}-worker-{i}.log"), "w")
    return subprocess.Popen([sys.executable, "-m", "tuner.cli.main", "worker", "--study", study, "--storage", url,
                             "--quiet", "--max-timing-s", "0.3"], cwd=work, env=_env(work), stdout=log, stderr=log)


def _proxy(work: str, db_url: str, port: int = 0) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "tuner.cli.main", "proxy", "--storage", db_url, "--host",
                             "127.0.0.1", "--port", str(port)], cwd=work, env=_env(work), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline() if select.select([proc.stdout], [], [], 120)[0] else ""
    m = re.search(r"--storage (grpc://127\.0\.0\.1:(\d+)) ", line)
    if not m:
        proc.kill()
        raise SystemExit(f"the proxy did not start: {line!r}")
    return proc, m.group(1)


def _trials(db_url: str, study: str) -> list:
    return optuna.load_study(study_name=study, storage=db_url).get_trials(deepcopy=False)


def _ours(work: str) -> list[psutil.Process]:
    """Processes of this run still alive: every one it started, and their children however orphaned, carries
    its TUNER_CACHE in its environment."""
    cache, out = _env(work)["TUNER_CACHE"], []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get("TUNER_CACHE") == cache:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def kill_loop(db_url: str, through: str, args, work: str) -> dict:
    rng = random.Random(args.seed)
    study = f"kill-{through}-{os.getpid()}"
    proxy, port = None, 0
    url = db_url
    if through == "proxy":
        proxy, url = _proxy(work, db_url)
        port = int(url.rsplit(":", 1)[1])
    t0 = time.monotonic()
    r = _tuner(work, "tune", os.path.join(work, "demo.onnx"), "--study", study, "--storage", url, "--space",
               os.path.join(SPACES_DIR, "onnxruntime-cpu-small.yaml"), "--shape", "x=2x64x256", "--require",
               "cos<=0.005", "--max-timing-s", "0.3", "--quiet", "--seed", str(args.seed), "--max-trials",
               str(args.trials), "--n-trials", "1", "--no-select")
    if r.returncode != 0:
        raise SystemExit(f"tune failed: {r.stderr[-2000:]}")
    n_started = 0

    def start() -> subprocess.Popen:
        nonlocal n_started
        n_started += 1
        p = _worker(work, url, study, n_started)
        return p

    workers = [start() for _ in range(args.workers)]
    ever_complete: set[int] = set()
    kills = proxy_kills = 0
    while kills < args.kills:
        time.sleep(rng.uniform(1.0, 4.0))
        ever_complete |= {t.number for t in _trials(db_url, study) if t.state == TrialState.COMPLETE}
        workers = [w for w in workers if w.poll() is None]
        workers += [start() for _ in range(args.workers - len(workers))]  # one that lost the proxy, replaced
        live = [w for w in workers if w.poll() is None]
        if budget_counts(_trials(db_url, study))[0] >= args.trials:  # spent before the kills are: stop there
            break
        victim = rng.choice(live)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        kills += 1
        workers = [w for w in workers if w is not victim] + [start()]
        if proxy is not None and kills == args.kills // 2:  # the proxy itself, once, restarted on its port
            proxy.send_signal(signal.SIGKILL)
            proxy.wait()
            proxy_kills += 1
            time.sleep(1.0)
            proxy, url = _proxy(work, db_url, port)  # workers that lost it end in one line: replaced below
        # run the budget out: a worker that lost the proxy or ended early is replaced until the budget is spent
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        trials = _trials(db_url, study)
        finished, running = budget_counts(trials)
        if finished >= args.trials and running == 0:
            break
        workers = [w for w in workers if w.poll() is None]
        if len(workers) < args.workers and finished + running < args.trials:
            workers.append(start())
        time.sleep(1.0)
    for w in workers:
        try:
            w.wait(timeout=120)
        except subprocess.TimeoutExpired:
            w.kill()
    if proxy is not None:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=60)
    time.sleep(5.0)  # the grace period, and the children's own end
    trials = _trials(db_url, study)
    numbers = [t.number for t in trials]
    states = {s: sum(1 for t in trials if t.state == s) for s in TrialState}
    left = _ours(work)
    for p in left:
        p.kill()
    return {
        "through": through, "kills": kills, "proxy_kills": proxy_kills, "workers_started": n_started,
        "trials": len(trials), "complete": states[TrialState.COMPLETE], "failed": states[TrialState.FAIL],
        "lost": len(ever_complete - {t.number for t in trials if t.state == TrialState.COMPLETE}),
        "running": states[TrialState.RUNNING] + states[TrialState.WAITING],
        "budget": f"{budget_counts(trials)[0]}/{args.trials}", "unique": len(set(numbers)) == len(numbers) == max(numbers) + 1,
        "left": len(left), "wall_s": time.monotonic() - t0,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg", help="PostgreSQL URL (default: TUNER_TEST_PG_URL, else scripts/dev-postgres)")
    ap.add_argument("--through", choices=("postgres", "proxy", "both"), default="both")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--trials", type=int, default=40, help="the study-wide budget (--max-trials)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    url, ours = _pg_url(args.pg)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as work:
            write_demo_model(os.path.join(work, "demo.onnx"))
            for through in (("postgres", "proxy") if args.through == "both" else (args.through,)):
                rows.append(kill_loop(url, through, args, work))
                print(rows[-1], flush=True)
    finally:
        if ours:
            _stop_pg()
    print("\n| through | kills (proxy) | workers started | trials | complete | failed | lost | RUNNING/WAITING "
          "| budget spent | numbers unique | processes left | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['through']} | {r['kills']} ({r['proxy_kills']}) | {r['workers_started']} | {r['trials']} | "
              f"{r['complete']} | {r['failed']} | {r['lost']} | {r['running']} | {r['budget']} | "
              f"{'yes' if r['unique'] else 'no'} | {r['left']} | {r['wall_s']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
