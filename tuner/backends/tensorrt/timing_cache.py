"""The study's shared timing cache, and pinning the tactics of the best engine so far (TensorRT 10.8+).

Shared cache: one serialised ITimingCache per study, TensorRT version and GPU, under the cache dir
(`scope_dir`; outside a study, per model). A trial loads it before building and merges what it timed
back after (ITimingCache.combine, under a file lock: trials of `--jobs N` build at once). Studies never
share one, so two studies compared side by side (TPE against `--sampler fast`) time their own
tactics. Caveat: a cache hit skips timing, so the first trial to time a layer fixes its tactic for
every later trial; knobs that only change timing (avg_timing_iterations, max_num_tactics) then act
only on layers not yet in the cache. `timing_cache: off` times every trial afresh.

Pinning: with BuilderFlag.EDITABLE_TIMING_CACHE the builder records the tactic it chose per cache key
(NVIDIA's sampleEditableTimingCache). After a build the backend writes its cache (timing.cache) and
those entries (tactics.json, from queryKeys/query, for people) beside the engine; after its timing the
evaluator tells the backend the engine's latency, and `offer_best` keeps the pair of the fastest
feasible engine so far. A trial with pin_tactics=true starts from its usual cache, adds the best
cache's entries (combine adds missing keys, skips conflicting ones) and then overwrites the
conflicting ones with ITimingCache.update (which only changes keys that exist), so every layer whose
key the best engine had reuses the best engine's tactic.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from typing import Any

from ...store.locks import device_lock
from ..common.paths import slug

TACTICS_FILE = "tactics.json"
CACHE_FILE = "timing.cache"
_KEY = re.compile(r"^0[xX][0-9a-fA-F]{32}$")  # str(TimingCacheKey): '0x' + 16 bytes in hex


def scope_dir(cache_dir: str, scope: str, trt_version: str, gpu: str) -> str:
    """The caches of one study (scope) on one TensorRT version and GPU model."""
    return os.path.join(cache_dir, "tensorrt", slug(scope), f"{slug(trt_version)}-{slug(gpu)}")


SHARED_FILE = "timing.cache"  # in scope_dir: what every trial of the study has timed
BEST_CACHE, BEST_TACTICS, BEST_RECORD = "best-timing.cache", "best-tactics.json", "best.json"


# ------------------------------------------------------------------------------ tactics.json (pure)


def encode_tactics(entries: dict[str, tuple[int, float]], meta: dict[str, Any] | None = None) -> str:
    """{key text: (tactic hash, time ms)} -> JSON, hashes as hex (they do not fit in a double)."""
    bad = [k for k in entries if not _KEY.match(k)]
    if bad:
        raise ValueError(f"not a timing cache key: {bad[0]!r}")
    doc = {"meta": meta or {}, "tactics": {k: {"tactic": f"0x{h:x}", "ms": ms} for k, (h, ms) in sorted(entries.items())}}
    return json.dumps(doc, indent=1)


def decode_tactics(text: str) -> dict[str, tuple[int, float]]:
    doc = json.loads(text)
    out = {}
    for k, v in doc.get("tactics", {}).items():
        if not _KEY.match(k):
            raise ValueError(f"{TACTICS_FILE}: not a timing cache key: {k!r}")
        out[k] = (int(v["tactic"], 16), float(v["ms"]))
    return out


# ------------------------------------------------------------------------------ files (no TensorRT)


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """An exclusive lock on path + '.lock' (released by the kernel if the holder dies)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with device_lock(path + ".lock"):
        yield


def write_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def offer_best(engine_dir: str, scope: str, median_ms: float) -> bool:
    """Keep the timing cache and tactics of the engine in engine_dir as the study's best when it is
    faster than the best so far (the caller offers feasible engines only). Returns whether it was kept;
    an engine built without a timing cache is never kept."""
    src = os.path.join(engine_dir, CACHE_FILE)
    if not os.path.isfile(src):
        return False
    record = os.path.join(scope, BEST_RECORD)
    with locked(record):
        best = json.loads(read_bytes(record) or b"{}")
        if "median_ms" in best and best["median_ms"] <= median_ms:
            return False
        write_atomic(os.path.join(scope, BEST_CACHE), read_bytes(src))
        tactics, kept = os.path.join(engine_dir, TACTICS_FILE), os.path.join(scope, BEST_TACTICS)
        if os.path.isfile(tactics):
            write_atomic(kept, read_bytes(tactics))
        elif os.path.isfile(kept):  # never leave the previous best's tactics beside the new best's cache
            os.remove(kept)
        write_atomic(record, json.dumps({"median_ms": median_ms, "engine_dir": os.path.abspath(engine_dir)}).encode())
    return True


# ------------------------------------------------------------------------------ TensorRT side


def attach(trt, bconfig, data: bytes):
    """A timing cache from serialised bytes (b'' = empty), set on the builder config."""
    cache = bconfig.create_timing_cache(data)
    bconfig.set_timing_cache(cache, ignore_mismatch=False)
    return cache


def merge_into_file(trt, bconfig, cache, path: str) -> None:
    """Merge what this build timed into the shared file, under its lock."""
    with locked(path):
        existing = read_bytes(path)
        if existing:
            merged = bconfig.create_timing_cache(existing)
            merged.combine(cache, ignore_mismatch=False)
            write_atomic(path, bytes(merged.serialize()))
        else:
            write_atomic(path, bytes(cache.serialize()))


def snapshot(cache) -> dict[str, tuple[int, float]]:
    """Every entry of an (editable) timing cache: {str(TimingCacheKey): (tacticHash, timingMSec)}."""
    out = {}
    for key in cache.queryKeys():
        value = cache.query(key)
        out[str(key)] = (int(value.tacticHash), float(value.timingMSec))
    return out


def pin(trt, bconfig, cache, best_bytes: bytes) -> int:
    """Give `cache` the best engine's tactic for every key that engine had; returns how many entries
    were overwritten. combine() adds the keys `cache` lacks; update() overwrites the ones it has."""
    best = bconfig.create_timing_cache(best_bytes)
    cache.combine(best, ignore_mismatch=False)
    overwritten = 0
    for text, (tactic, ms) in snapshot(best).items():
        if cache.update(trt.TimingCacheKey.parse(text), trt.TimingCacheValue(tactic, ms)):
            overwritten += 1
    return overwritten
