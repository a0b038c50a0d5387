"""What a study measures before its first trial: route variants, per-layer sensitivity, the greedy float set."""
