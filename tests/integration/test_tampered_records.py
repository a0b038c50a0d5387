"""A study database is input too (issue 43): a real study made by `tuner tune` on SQLite, then one trial's
stored attribute replaced in the file (another type, removed, huge, markup, NaN, an attribute added), read
by each reading command. A trial of another shape is left out with one note naming the study, the trial and
the attribute; the command goes on (status, trials, report) or, where it needs that trial, refuses in one
line (export). No row gives a traceback."""
import json
import shutil
import sqlite3

import pytest
from cli_run import run_cli

from tuner.inputs.space import SPACES_DIR

SMALL = f"{SPACES_DIR}/onnxruntime-cpu-small.yaml"
HUGE = "x" * 200_000


@pytest.fixture(scope="module")
def made(tmp_path_factory, demo_path):
    """A study of 3 trials with its winner selected; (folder, winner trial number)."""
    tmp = tmp_path_factory.mktemp("tampered")
    from tuner.cli.main import main  # run_cli needs capsys, which a module's fixture has not

    code = main(["tune", demo_path, "--study", "s", "--storage", f"sqlite:///{tmp}/made.db", "--space", SMALL,
                 "--shape", "x=2x64x256", "--n-trials", "3", "--max-timing-s", "1", "--quiet", "--top-k", "1"])
    assert code == 0
    with sqlite3.connect(tmp / "made.db") as db:
        (winner,) = db.execute("SELECT value_json FROM study_user_attributes WHERE key='winner'").fetchone()
    return tmp, json.loads(winner)["trial"]


def _tampered(made, key: str, value, tmp_path, number: int | None = None) -> str:
    """A copy of the study whose trial `number` (default: the winner) has its attribute `key` set to `value`
    (json text), or removed (None)."""
    folder, winner = made
    number = winner if number is None else number
    with sqlite3.connect(folder / "made.db") as src, sqlite3.connect(tmp_path / "t.db") as copy:
        src.backup(copy)  # the WAL's pages too
    shutil.copytree(folder / "s-artifacts", tmp_path / "s-artifacts")  # the engines export takes, beside the file
    with sqlite3.connect(tmp_path / "t.db") as db:
        (trial_id,) = db.execute("SELECT trial_id FROM trials WHERE number=?", (number,)).fetchone()
        db.execute("DELETE FROM trial_user_attributes WHERE trial_id=? AND key=?", (trial_id, key))
        if value is not None:
            db.execute("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
                       (trial_id, key, value))
    return f"sqlite:///{tmp_path / 't.db'}"


# (attribute, stored JSON text or None for removed, the type it should have had: None where the record reads)
ROWS = [
    ("config", '"fp32"', "a mapping"),
    ("metrics", '"0.001"', "a mapping whose values are each a number"),
    ("metrics", '{"cos": "low"}', "a mapping whose values are each a number"),
    ("precision", '"int8"', "a mapping"),
    ("latency", '"12 ms"', "LatencyStats"),
    ("latency", '{"median_ms": 12.0}', "LatencyStats"),
    ("latency", json.dumps(HUGE), "LatencyStats"),
    ("relative", "[1, 2]", "RelativeLatency"),
    ("per_output", '{"y": 3}', "a mapping whose values are each a mapping"),
    ("fail_reason", '{"why": 1}', "a string"),
    ("precision", json.dumps({"inference": "<script>document.title='owned'</script>"}), None),
    ("metrics", '{"cos": NaN, "max_abs": 0.1, "snr_db": 40.0, "rel_l2": 0.0, "max_rel": 0.0}', None),
    ("latency", None, None),
    ("metrics", None, None),
    ("config", None, None),
    ("zzz_added_by_another_tool", '{"a": [1, 2, 3]}', None),
]


@pytest.mark.parametrize("key, value, expected", ROWS, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(ROWS)])
def test_a_tampered_trial_is_left_out_of_reads_and_refused_for_export(made, key, value, expected, tmp_path, capsys):
    url = _tampered(made, key, value, tmp_path)
    number = made[1]
    said = f"study s, trial {number}: attribute {key!r} is "
    for argv in (["status"], ["trials"], ["report", "--out", str(tmp_path / "r.html")]):
        code, out, err = run_cli([*argv, "--study", "s", "--storage", url], capsys)
        assert "Traceback" not in err and code == 0, (argv, code, err[-2000:])
        if expected:
            (note,) = [line for line in err.splitlines() if said in line]
            assert expected in note.split("; expected ", 1)[1] and "left out" in note and len(note) < 400, note
        else:
            assert said not in err
    code, out, err = run_cli(["export", "--study", "s", "--storage", url, "--out", str(tmp_path / "out"),
                              "--no-verify"], capsys)
    assert "Traceback" not in err
    if expected:
        assert code == 2 and f"the winner, trial {number}, cannot be exported: attribute {key!r}" in err, err
        assert not (tmp_path / "out").exists()
    else:
        assert code == 0, err[-2000:]


def test_select_goes_on_without_a_tampered_trial(made, tmp_path, capsys):
    """select re-times the finalists among the trials it can read: the tampered one (not the baseline, which
    every speedup needs) is neither a finalist nor the winner, and is named in a note."""
    number = made[1] or 1
    url = _tampered(made, "metrics", '"0.001"', tmp_path, number)
    code, out, err = run_cli(["select", "--study", "s", "--storage", url, "--top-k", "1"], capsys)
    assert "Traceback" not in err and code == 0, err[-2000:]
    assert f"study s, trial {number}: attribute 'metrics' is str" in err
    with sqlite3.connect(tmp_path / "t.db") as db:
        (winner,) = db.execute("SELECT value_json FROM study_user_attributes WHERE key='winner'").fetchone()
    assert json.loads(winner)["trial"] in {0, 1, 2} - {number}


@pytest.mark.parametrize("value", ['"trial 2"', "[2]"])
def test_a_tampered_winner_record_is_left_out_and_export_has_none(made, value, tmp_path, capsys):
    folder, _ = made
    with sqlite3.connect(folder / "made.db") as src, sqlite3.connect(tmp_path / "t.db") as copy:
        src.backup(copy)
    with sqlite3.connect(tmp_path / "t.db") as db:
        db.execute("UPDATE study_user_attributes SET value_json=? WHERE key='winner'", (value,))
    url = f"sqlite:///{tmp_path / 't.db'}"
    for argv in (["status"], ["trials"], ["report", "--out", str(tmp_path / "r.html")]):
        code, out, err = run_cli([*argv, "--study", "s", "--storage", url], capsys)
        assert "Traceback" not in err and code == 0, (argv, code, err[-2000:])
        (note,) = [line for line in err.splitlines() if "study s: attribute 'winner' is " in line]
        assert "expected a mapping or null" in note and "left out" in note, note
    code, out, err = run_cli(["export", "--study", "s", "--storage", url, "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "has no confirmed winner" in err and "Traceback" not in err, err
