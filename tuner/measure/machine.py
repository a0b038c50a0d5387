"""The machine a latency was measured on: timings from different fingerprints are not comparable."""
from __future__ import annotations

import hashlib
import json
import os
import platform

from .. import __version__

# What decides timings; the host name does not (several hosts of one kind share a study).
_COMPARED = ("cpu", "cores", "memory_gib", "system", "versions")


def cpu_model() -> str:
    """The CPU's model name (Linux), else what the platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags (Linux: x86 `flags`, Arm `Features`), or None where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":")[0].strip() in ("flags", "Features"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def _memory_gib() -> float:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return 0.0


def library_versions(backend_versions: dict[str, str]) -> dict[str, str]:
    """The tuner's own libraries plus the backends' (Backend.versions())."""
    import onnx
    import optuna

    return {"engine-tuner": __version__, **backend_versions, "onnx": onnx.__version__, "optuna": optuna.__version__}


def fingerprint(backend_versions: dict[str, str], devices: dict[str, dict] | None = None) -> dict:
    """CPU model, cores, memory, libraries; with devices (Backend.device_info() of a GPU backend), the GPU too."""
    fp = {
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 1,
        "memory_gib": _memory_gib(),
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "versions": library_versions(backend_versions),
        # Machines that look alike but time differently (CPU quotas, power settings) can be told apart.
        "tag": os.environ.get("TUNER_MACHINE_TAG", ""),
    }
    if devices:
        fp["devices"] = devices
    return fp


def same_machine(a: dict, b: dict) -> bool:
    return (all(a.get(k) == b.get(k) for k in _COMPARED) and (a.get("tag") or "") == (b.get("tag") or "")
            and a.get("devices") == b.get("devices"))


def machine_id(fp: dict) -> str:
    """A short id of what decides timings (the fields same_machine compares)."""
    fields = {k: fp.get(k) for k in _COMPARED} | ({"tag": fp["tag"]} if fp.get("tag") else {})
    if fp.get("devices"):
        fields["devices"] = fp["devices"]
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
