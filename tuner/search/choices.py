"""The allowed values of every setting a user names on the command line: the one place that knows them.
The CLI's argparse choices and the study record (tuner.search.settings) both read them. Imports nothing,
so the CLI builds its parser without loading the tuner."""
from __future__ import annotations

from enum import Enum


class Timing(str, Enum):
    """How a candidate is timed: paired (alternately with the baseline in the same window, ranked by the
    ratio: measure/paired.py; the default on CPU backends) or alone (by itself, ranked by milliseconds)."""

    PAIRED = "paired"
    ALONE = "alone"


class Objectives(str, Enum):
    """What the study minimises: latency and error (a Pareto front), or latency alone."""

    LATENCY_ERROR = "latency,error"
    LATENCY = "latency"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.value.split(","))


# tpe .. grid: Optuna's samplers; fast, full, mixed: TensorRT's tuning strategies (tuner.search.plan_samplers)
SAMPLERS = ("tpe", "nsga2", "gp", "random", "grid", "fast", "full", "mixed")
TRIAL_SORTS = ("number", "speed", "error")  # `tuner trials --sort`
# --keep-artifacts: which engines a selection leaves in the study's artifact store. The default is the winner's:
# export and verify read no other (a 90 MB encoder's 5 finalists took 371 MB). finalists: each confirmed
# finalist's, as timed; all: those, every trial's kept engine and every earlier selection's (--keep-engines).
KEEP_ARTIFACTS = ("winner", "finalists", "all")
DEFAULT_KEEP_ARTIFACTS = "winner"
WHEN_BUSY = ("warn", "wait")  # wait: hold a timing back while other processes keep the machine busy
# how the analysis ranks layers (tuner.analysis.sensitivity): one float and one all-quantized run, or two builds a layer
SENSITIVITY_METHODS = ("activations", "builds")


def values(choices) -> list[str]:
    """The names a user may give: an Enum's values, or a tuple as it is."""
    return [c.value for c in choices] if isinstance(choices, type) and issubclass(choices, Enum) else list(choices)
