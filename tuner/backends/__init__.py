"""Backends: the seam (base.py) and one package per inference compiler."""
import sys

# OpenVINO's usage telemetry (the openvino_telemetry package, on unless a user opted out) sends an event
# on every `import openvino` from a background thread, which forks. A trial's child forked from the
# forkserver while that thread held an import lock hung in start-up until the trial timed out (3 of 20
# loaded `tune --jobs 4` runs). Marked as missing, openvino and nncf run without telemetry. This package
# is imported before any backend, in the tuner and in its forkserver alike.
sys.modules.setdefault("openvino_telemetry", None)
