"""--quiet means quiet (tuner.execute.isolate): what a build child writes to stderr (NNCF's numpy warnings,
ONNX Runtime's own lines) goes to the study's trials log, not the terminal."""
import os
import sys
import warnings

from tuner.execute.isolate import IsolatedRunner


def noisy_job(on_phase=None) -> int:
    warnings.warn("invalid value encountered in subtract", RuntimeWarning, stacklevel=1)  # as numpy says it
    os.write(2, b"AddConfigEntry: entry already exists\n")  # a C++ library writing to fd 2 itself
    print("consider pre-processing", file=sys.stderr, flush=True)
    return 7


def test_a_child_s_stderr_goes_to_the_log(tmp_path, capfd):
    log = tmp_path / "s-trials.log"
    runner = IsolatedRunner(log_path=str(log))
    assert runner.call(noisy_job, {}, 60) == 7
    text = log.read_text()
    assert "invalid value encountered in subtract" in text and "AddConfigEntry" in text and "consider pre-processing" in text
    err = capfd.readouterr().err
    assert "AddConfigEntry" not in err and "pre-processing" not in err and "subtract" not in err

