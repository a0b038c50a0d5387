"""An objective that walks the real space and stores what a real trial stores, but builds nothing:
what it costs is the sampler and the storage, the part of a study that is not the builds."""
from __future__ import annotations

from tuner.inputs.configs import normalize, trial_chooser
from tuner.search.objective import build_key
from tuner.search.study import StudyContext


def synthetic_objective(ctx: StudyContext):
    problem = ctx.problem

    def objective(trial):
        config = normalize(problem.space, trial_chooser(trial), problem.graph_nodes)
        trial.set_user_attr("config", config)
        trial.set_user_attr("build_key", build_key(ctx.settings, config))
        trial.set_user_attr("machine", ctx.settings.machine)
        kept = len(config.get("keep_float", []))
        quant = config["precision"] != "fp32"
        # A made-up but structured landscape: quantizing is faster, keeping layers in float costs
        # speed and buys accuracy, threads help a little.
        latency = 30.0 * (0.6 if quant else 1.0) * (1 + 0.02 * kept) * (1.0 / config["intra_op_num_threads"]) ** 0.3
        error = (0.02 / (1 + kept)) if quant else 1e-7
        trial.set_user_attr("latency", {"median_ms": latency, "p10_ms": latency, "p90_ms": latency})
        trial.set_user_attr("metrics", {"cos": error})
        trial.set_constraint("cos<=0.005", error - 0.005)
        return latency, error

    return objective
