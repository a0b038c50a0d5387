"""What a user hands the tuner, read and checked: the model's graph facts, data, reference outputs, spaces, configs, paths."""
