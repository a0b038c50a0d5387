"""Before the first build: is there room for what the study will write? A write that fails mid-study fails every
trial (exit 3) and a resume brings them back; a warning up front saves the hours before it."""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from ..search.choices import DEFAULT_KEEP_ARTIFACTS
from .options import TuneOptions

BUILDS_AT_ONCE = 2  # a worker's engine folders at once: the candidate's and the baseline's


def engines_kept(opts: TuneOptions) -> int:
    """About how many engines of the model's size the study holds at its busiest: each worker's builds, and
    what the artifact store keeps (every trial's with --keep-engines; the finalists', the winner's)."""
    at_once = BUILDS_AT_ONCE * opts.jobs
    trials = opts.n_trials or opts.max_trials or 100
    keep = opts.keep_artifacts or ("all" if opts.keep_engines else DEFAULT_KEEP_ARTIFACTS)
    stored = {"all": trials + opts.top_k + 1, "finalists": opts.top_k + 1, "winner": 1}.get(keep, 1)
    return at_once + (stored if opts.select else 0)


def disk_warning(opts: TuneOptions, model_bytes: int, folder: str,
                 free: Callable[[str], int] = lambda p: shutil.disk_usage(p).free) -> str | None:
    """One line where `folder`'s disk has less free space than the study will likely need, else None."""
    while folder and not os.path.isdir(folder):  # the folder the study will make: its nearest existing parent
        folder = os.path.dirname(folder)
    n = engines_kept(opts)
    need, have = model_bytes * n, free(folder or ".")
    if have >= need:
        return None
    return (f"warning: {have / 1e6:.0f} MB free on {os.path.abspath(folder or '.')}, and this study will likely need "
            f"about {need / 1e6:.0f} MB there (the model's {model_bytes / 1e6:.0f} MB x {n} engines: the builds at "
            f"once and what the artifact store keeps); free some space, or give --engines-dir and --artifacts "
            f"elsewhere")
