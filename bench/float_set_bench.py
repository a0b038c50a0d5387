"""The two ways to find a route's float set on the bench models (issue 40): `activations` (the default: one
float and one all-quantized run, each layer's output compared, then the set confirmed by builds) against
`builds` (two builds per layer, then the greedy pass). Prints a markdown table; asserts nothing.

  python bench/float_set_bench.py --models demo minilm-sdpa ocr-rec

Each row is `tuner sensitivity MODEL --space onnxruntime-cpu --route int8-dynamic --method M --greedy
--no-variants` on the model's bench inputs and requirement (backends_bench.model_inputs), in a fresh process
with a fresh cache: the float set it keeps, its size, the greedy pass's builds and the wall time. Prints the
CPU's flags (int8 kernels differ between CPUs; the float sets are accuracy, not speed).
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from backends_bench import model_inputs  # noqa: E402

from tuner.measure.machine import cpu_flags  # noqa: E402

METHODS = ("activations", "builds")
GREEDY = re.compile(r"greedy float set: (\[.*?\]|none)[^(]*\((\d+) builds\)")
CANDIDATES = re.compile(r"(\d+) candidates")


def run(model: str, method: str, work: str) -> dict:
    path, inputs = model_inputs(model, work)
    data = ["--data", inputs["data"]] if "data" in inputs else [a for s in inputs["shapes"] for a in ("--shape", s)]
    cmd = [sys.executable, "-m", "tuner.cli.main", "sensitivity", path, "--space", "onnxruntime-cpu", "--route",
           "int8-dynamic", "--method", method, "--greedy", "--no-variants", "--require", inputs["require"],
           "--out", os.path.join(work, f"{model}-{method}"), *data]
    env = os.environ | {"TUNER_CACHE": os.path.join(work, f"cache-{model}-{method}")}  # nothing reused
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    found = GREEDY.search(proc.stdout)
    if proc.returncode != 0 or found is None:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"], "wall_s": wall}
    kept = [] if found.group(1) == "none" else ast.literal_eval(found.group(1))  # the list tuner printed
    candidates = CANDIDATES.search(proc.stdout)
    return {"kept": kept, "builds": int(found.group(2)), "wall_s": wall,
            "candidates": int(candidates.group(1)) if candidates else None, "requirement": inputs["require"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["demo", "minilm-sdpa", "ocr-rec"])
    args = ap.parse_args(argv)
    isa = {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16", "avx512_fp16"}
    print("CPU flags:", " ".join(sorted((cpu_flags() or frozenset()) & isa)))
    print("\n| model | requirement | method | candidates | float set | size | greedy builds | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            sets = {}
            for method in METHODS:
                r = run(model, method, work)
                if "error" in r:
                    print(f"| {model} | | {method} | | failed: {r['error'][0][:80]} | | | {r['wall_s']:.0f} |")
                    continue
                sets[method] = set(r["kept"])
                shown = ", ".join(r["kept"]) if len(r["kept"]) <= 6 else ", ".join(r["kept"][:6]) + ", ..."
                print(f"| {model} | {r['requirement']} | {method} | {r['candidates']} | {shown} | {len(r['kept'])} | "
                      f"{r['builds']} | {r['wall_s']:.0f} |", flush=True)
            if len(sets) == 2:
                a, b = sets["activations"], sets["builds"]
                same = "yes" if a == b else f"no: only activations {sorted(a - b)}, only builds {sorted(b - a)}"
                print(f"| {model} | | same set? | | {same} | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
