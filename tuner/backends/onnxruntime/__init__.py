"""The ONNX Runtime CPU backend (backend.py), its engine as timing loads it (runner.py: ONNX Runtime alone),
its session options, precision routes, profiler and graph optimizer names. Light on purpose: a process that
only times a saved engine imports runner.py without the builders."""
