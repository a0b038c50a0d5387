"""The search: Optuna studies over a space. It knows candidates (configs) and results (trial records),
never how an engine is built or timed; the run layer hands it an evaluator."""
