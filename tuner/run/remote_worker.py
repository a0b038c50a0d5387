"""`tuner worker`: join an existing study (any host, one database) and run its trials until the
study-wide budget, or this worker's own, is spent."""
from __future__ import annotations

import os

from ..errors import UserError
from ..measure.latency import LatencyProtocol
from ..measure.machine import machine_id
from ..problem.spec import print_notes
from ..report.progress import TrialProgress
from ..search.record import StoredStudy
from ..store.optuna_private import storage_of
from ..store.proxy_client import ProxyLossGuard
from .claims import TrialClaims, budget_counts, worker_name
from .join import join_study
from .local_workers import Budget, trial_loop
from .options import TuneOptions, trials_log


def run_worker(url: str, name: str, n_trials: int | None = None, timeout: float | None = None,
               model: str | None = None, data: str | None = None, space: str | None = None,
               calib_data: str | None = None, allow_other_machine: bool = False, trial_timeout: float = 600.0,
               protocol: LatencyProtocol | None = None, quiet: bool = True, keep_engines: bool = False,
               engines_dir: str | None = None, when_busy: str = "warn", allow_metrics: list[str] | None = None,
               ref_outputs: str | None = None) -> dict:
    """`tuner worker`: run trials of an existing study until its budget (or this worker's) is spent. It runs
    a user metric the study names only if allow_metrics (--allow-metric) names it (docs/distributed.md). model, data,
    space, calib_data, ref_outputs: the study's files where this host has them elsewhere (their hashes checked)."""
    if n_trials is not None and n_trials < 1:
        raise UserError(f"--n-trials {n_trials}: needs at least 1")
    with ProxyLossGuard(url) as guard:  # behind a `tuner proxy` that dies: one line, no gRPC traceback
        ctx, other = join_study(url, name, os.getpid(), model, data, space, calib_data, allow_other_machine,
                                allow_metrics=allow_metrics or (), ref_outputs=ref_outputs)
        guard.storage = storage_of(ctx.study)  # its grace period goes in that line
        print_notes(ctx.problem.notes)
        stored = StoredStudy.of(ctx.study)
        if n_trials is None and timeout is None and not stored.has_budget:
            raise UserError(f"study {name!r} has no study-wide budget (tuner tune ... --max-trials N); "
                            "give this worker --n-trials N and/or --timeout T")
        if protocol is None and stored.protocol:
            protocol = LatencyProtocol(**stored.protocol)
        opts = TuneOptions(study=name, storage=url, n_trials=n_trials, timeout=timeout, trial_timeout=trial_timeout,
                           protocol=protocol, quiet=quiet, progress=not quiet, keep_engines=keep_engines,
                           when_busy=when_busy, engines_dir=engines_dir or os.path.join(
                               "tuner-engines", f"{name}-{worker_name().replace(':', '-')}"))
        budget = Budget(n_trials, timeout)
        with TrialProgress(n_trials, timeout, live=not quiet, quiet=quiet,
                           log_path=trials_log(name, opts.engines_dir)) as progress:  # this host's full lines
            trial_loop(ctx, opts, budget, [progress], claims=TrialClaims(ctx, budget, other_machine=other))
        trials = ctx.study.get_trials(deepcopy=False)
        finished, running = budget_counts(trials)
        return {"ran": progress.done, "finished": finished, "running": running,
                "max_trials": StoredStudy.of(ctx.study).max_trials, "other_machine": other,
                "machine": machine_id(ctx.settings.machine)}
