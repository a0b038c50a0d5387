"""The TensorRT backend: the backend itself in .backend; the package imports nothing, so the CLI builds the
parser of `tuner routes` (.cli), the command this backend brings, without loading the backend."""
