"""The cache directory (reference outputs, calibration ranges, sensitivity tables, compile caches),
resolved when it is used: TUNER_CACHE, else .tuner-cache in the working directory."""
from __future__ import annotations

import json
import os
import pickle
from typing import Any

CACHE_ENV = "TUNER_CACHE"


def cache_dir() -> str:
    """The cache directory, created if missing."""
    path = os.environ.get(CACHE_ENV) or ".tuner-cache"
    os.makedirs(path, exist_ok=True)
    return path


def cache_path(name: str) -> str:
    return os.path.join(cache_dir(), name)


def _write_atomically(path: str, data: bytes) -> None:
    """Readers never see half a file, and two processes writing the same entry both succeed."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_pickle(name: str) -> Any | None:
    path = cache_path(name)
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return pickle.load(f)


def write_pickle(name: str, value: Any) -> None:
    _write_atomically(cache_path(name), pickle.dumps(value))


def read_json(name: str) -> Any | None:
    path = cache_path(name)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def write_json(name: str, value: Any) -> None:
    _write_atomically(cache_path(name), json.dumps(value).encode())


def write_text(name: str, text: str) -> None:
    _write_atomically(cache_path(name), text.encode())
