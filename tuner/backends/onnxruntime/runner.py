"""An ONNX Runtime engine as its timing needs it: the session over a saved engine's model file, run on a
staged batch. Imports ONNX Runtime and nothing of the builders (no onnx, no quantizers), so a process that
only times a saved engine starts in a fraction of a second (tuner.execute.engine_process)."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import onnxruntime as ort

from ..base import Batch, Outputs
from .session import adapt_feed, make_session, read_engine_dir, run_float32

NAME = "onnxruntime"


class OrtRunner:
    """An InferenceSession over the engine's model file, with the session options it was built with."""

    def __init__(self, session: ort.InferenceSession, model_path: str, settings: dict[str, Any]):
        self.session, self.model_path, self.settings = session, model_path, settings
        self._pool: ThreadPoolExecutor | None = None  # concurrent_call's request threads

    def run(self, batch: Batch) -> Outputs:
        return run_float32(self.session, batch)

    def timed_call(self, batch: Batch) -> Callable[[], None]:
        session, feed = self.session, adapt_feed(self.session, batch)
        return lambda: session.run(None, feed)

    def concurrent_call(self, batch: Batch, in_flight: int) -> Callable[[], None]:
        """`in_flight` runs of the session at once, each from a thread of its own (ONNX Runtime releases the GIL in
        run(); a session takes concurrent runs), all done when the call returns."""
        session, feed = self.session, adapt_feed(self.session, batch)
        self._pool = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="request")

        def call() -> None:
            for done in [self._pool.submit(session.run, None, feed) for _ in range(in_flight)]:
                done.result()

        return call

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self.session = None


def load(engine_dir: str) -> OrtRunner:
    """The engine Engine.save wrote into engine_dir, with the settings it was built with."""
    model_path, settings = read_engine_dir(engine_dir, NAME)
    return OrtRunner(make_session(model_path, settings), model_path, settings)
