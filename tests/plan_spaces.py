"""Small spaces and a synthetic objective shared by the plan sampler tests (unit and integration)."""
from __future__ import annotations

import time

import optuna

from tuner.inputs.configs import normalize, trial_chooser
from tuner.inputs.space import Param, Space


def conditional_params() -> list[Param]:
    """a (3 choices); b under a=y; c (int 1..3) under b=True; d free; e float; f under a=y and b=True."""
    return [
        Param("a", "categorical", "x", ["x", "y", "z"]),
        Param("b", "bool", False, [False, True], when={"a": ["y"]}),
        Param("c", "int", 1, low=1, high=3, when={"b": [True]}),
        Param("d", "categorical", "p", ["p", "q"]),
        Param("e", "float", 0.5, low=0.0, high=1.0),
        Param("f", "categorical", "u", ["u", "v"], when={"a": ["y"], "b": [True]}),
    ]


def space_of(params: list[Param]) -> Space:
    return Space("test.yaml", "test", "synthetic", params, [])


# Effects on a latency of 10 ms. a=y: -10% (helped); b: -0.5% after a=y (its plan is faster than the
# baseline only through a=y: not helped); c=2: -5.6% after a=y,b (helped); d=q: faster but
# infeasible; e=1.0: -3% (helped); f=v: -1% (under the 2% margin).
EFFECTS = {("a", "y"): -1.0, ("a", "z"): 1.0, ("b", True): -0.05, ("c", 2): -0.5, ("c", 3): 0.3,
           ("d", "q"): -0.5, ("e", 1.0): -0.3, ("e", 0.0): 0.1, ("f", "v"): -0.1}
HELPED = ["a", "c", "e"]
EFFECTS.update({("k0", "c1"): -1.0, ("k1", "c2"): -0.5})  # wide_params: k0 and k1 help


def synthetic_objective(space: Space, sleep_s: float = 0.0):
    """latency = 10 + sum of effects; constraint 'accuracy' > 0 (infeasible) when d=q. Also asks a
    per-layer boolean and a per-layer int, which the samplers must answer with their defaults."""

    def objective(trial: optuna.Trial) -> float:
        config = normalize(space, trial_chooser(trial), graph_nodes=[])
        assert trial.suggest_categorical("keep_float/n1", [False, True]) is False
        assert trial.suggest_int("keep_float/top_k", 0, 5) == 3
        trial.set_user_attr("config", config)
        trial.set_constraint("accuracy", 1.0 if config.get("d") == "q" else -1.0)
        if sleep_s:
            time.sleep(sleep_s)
        return 10.0 + sum(EFFECTS.get((k, v), 0.0) for k, v in config.items())

    return objective


def wide_params(n: int = 8, k: int = 5) -> list[Param]:
    """n categorical knobs of k choices each: 1 + n*(k-1) fast plans."""
    return [Param(f"k{i}", "categorical", "c0", [f"c{j}" for j in range(k)]) for i in range(n)]


def parallel_params(strategy: str) -> list[Param]:
    """The space of test_parallel: 33 fast plans (fast, mixed), or 64 full plans."""
    return wide_params(n=3, k=4) if strategy == "full" else wide_params(n=8, k=5)
