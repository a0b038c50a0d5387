"""The OpenVINO CPU backend (backend.py), its engine as timing loads it (runner.py: OpenVINO alone), its
compile properties, device capabilities, NNCF routes and profiler. Light on purpose: a process that only
times a saved engine imports runner.py without the builders."""
