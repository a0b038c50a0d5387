"""Running studies: the tune command composes backend, evaluator, study and workers."""
