"""Does side-by-side timing measure each engine as it runs alone? (issues 6 and 21)

  python bench/interleave_bench.py [--model bench/models/mobilenet_v3_small.onnx --shape x=1x3x224x224]

Times one session alone, then N identical sessions side by side in blocks (tuner.measure.paired.time_blocks:
an untimed lead-in of at least 20 ms before each block), built plainly (threads keep spinning, as the
exported engine does) and with session.force_spinning_stop. Identical engines should read the same
as the lone one: the ratio column is side-by-side median / alone median. Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tuner.backends.onnxruntime.session import make_session  # noqa: E402
from tuner.cli.demo import write_demo_model  # noqa: E402
from tuner.measure.latency import LatencyProtocol  # noqa: E402
from tuner.measure.paired import time_blocks  # noqa: E402


def medians(model: str, feed: dict, n: int, interleaved: bool, rounds: int) -> list[float]:
    sessions = [make_session(model, {"intra_op_num_threads": os.cpu_count()}, interleaved) for _ in range(n)]
    calls = [lambda s=s: s.run(None, feed) for s in sessions]
    samples, _, _ = time_blocks(calls, LatencyProtocol(max_seconds=120), baseline=0, max_rounds=rounds)
    return [statistics.median(x for r in s for x in r) for s in samples]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="ONNX file (default: the demo model)")
    ap.add_argument("--shape", default="x=8x64x256", help="NAME=DxDx... of the float input")
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    name, dims = args.shape.split("=")
    feed = {name: np.random.default_rng(0).standard_normal([int(d) for d in dims.split("x")]).astype(np.float32)}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or write_demo_model(os.path.join(tmp, "demo.onnx"), outliers=2)
        alone = medians(model, feed, 1, False, args.rounds)[0]
        print(f"alone: {alone:.2f} ms  ({os.cpu_count()} cores, {args.sessions} sessions interleaved below)")
        print("| sessions built | median of medians ms | min–max ms | ratio to alone |\n|---|---|---|---|")
        for interleaved in (False, True):
            m = medians(model, feed, args.sessions, interleaved, args.rounds)
            label = "force_spinning_stop (spinning stops after each run)" if interleaved else "plain (threads keep spinning)"
            print(f"| {label} | {statistics.median(m):.2f} | {min(m):.2f}–{max(m):.2f} | {statistics.median(m) / alone:.2f} |")


if __name__ == "__main__":
    main()
