"""The machine a latency was measured on: timings from different fingerprints are not comparable."""
from __future__ import annotations

import os
import platform

from . import __version__


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return 0.0


def library_versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import optuna

    return {"engine-tuner": __version__, "onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__,
            "optuna": optuna.__version__}


def fingerprint() -> dict:
    """What decides timings: CPU model, cores, memory, libraries. Host name kept apart: it does not."""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 1,
        "memory_gib": _memory_gib(),
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "versions": library_versions(),
        # Machines that look alike but time differently (CPU quotas, power settings) can be told apart.
        "tag": os.environ.get("TUNER_MACHINE_TAG", ""),
    }


def same_machine(a: dict, b: dict) -> bool:
    keys = ("cpu", "cores", "memory_gib", "system", "versions")
    return all(a.get(k) == b.get(k) for k in keys) and (a.get("tag") or "") == (b.get("tag") or "")
