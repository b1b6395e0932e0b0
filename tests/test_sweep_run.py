"""Real sweeps of tiny runs: a failing trial recorded while the others finish, and a sweep
SIGKILLed part-way then run again — finished trials untouched (their rows what their runs wrote),
the interrupted one resumed, its metrics equal to an uninterrupted sweep's. The trials train
:data:`sweep_helpers.TINY_CONFIG` (an MLP on the digits as vectors): what is tested is the sweep's
bookkeeping, not the model."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from sweep_helpers import TIMEOUT_S, running_sweep, sweep_cli, tiny_beside, trial_rows, wait_for


@pytest.mark.slow
def test_a_failing_trial_is_recorded_with_its_error_and_the_others_finish(tmp_path):
    tiny_beside(tmp_path)
    sweep = tmp_path / "fail.yaml"
    sweep.write_text("""
config: tiny.yaml
overrides: {train.max_epochs: 1}
grid:
  variant:
    ok: {}
    bad: {model.backbone.args.hidden_dims: abc}
seeds: [0]
collect: [test.accuracy, {name: seconds, goal: none}]
""")
    res = sweep_cli(tmp_path, str(sweep), "--workers", "2", "--sweep-dir", "sw")
    assert res.returncode == 1, res.stderr
    rows = trial_rows(tmp_path / "sw")
    assert list(rows) == ["ok-seed0", "bad-seed0"]
    ok, bad = rows["ok-seed0"], rows["bad-seed0"]
    assert ok["status"] == "done" and 0.0 < float(ok["test.accuracy"]) <= 1.0 and float(ok["seconds"]) > 0
    assert ok["overrides"] == "train.max_epochs=1 --seed 0" and ok["variant"] == "ok" and ok["seed"] == "0"
    assert bad["status"] == "failed" and bad["test.accuracy"] == ""
    assert bad["error"].startswith("model.backbone.args.hidden_dims: expected") and "\n" not in bad["error"]
    assert "failed bad-seed0: model.backbone.args.hidden_dims" in res.stdout
    summary = json.loads((tmp_path / "sw" / "trials" / "ok-seed0" / "summary.json").read_text())
    assert summary["test"]["accuracy"] == float(ok["test.accuracy"])
    assert (tmp_path / "sw" / "trials" / "bad-seed0.log").read_text().count("error:") == 1
    results = (tmp_path / "sw" / "results.md").read_text()
    assert "| `ok` | 1 |" in results and "| `bad` | 0 (1 failed) | – | – |" in results
    assert (tmp_path / "sw" / "results.png").is_file() and (tmp_path / "sw" / "sweep.yaml").is_file()


# Three epochs: the second trial is killed once its first epoch is saved (last.pt), two epochs before its end.
KILL_SWEEP = """
config: tiny.yaml
overrides: {train.max_epochs: 3, train.num_threads: 1}
seeds: [0, 1]
collect: [test.accuracy, test.loss, best.val_accuracy]
"""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The sweep folder of :data:`KILL_SWEEP`'s seed 1 alone, run once without interruption: the
    reference of the killed sweep's resumed trial, and a finished trial for the refusal test. Its
    trial is a fresh process (``--cold-trials``), the killed sweep's are forked warm: the comparison
    also holds the two ways of starting a trial to the same figures."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    tiny_beside(folder)
    (folder / "seed1.yaml").write_text(KILL_SWEEP.replace("seeds: [0, 1]", "seeds: [1]"))
    res = sweep_cli(folder, "seed1.yaml", "--sweep-dir", "whole", "--cold-trials")
    assert res.returncode == 0, res.stdout + res.stderr
    return folder / "whole"


@pytest.mark.slow
def test_a_sweep_killed_part_way_continues_without_rerunning_finished_trials(tmp_path, uninterrupted):
    tiny_beside(tmp_path)
    sweep = tmp_path / "kill.yaml"
    sweep.write_text(KILL_SWEEP)
    killed, trials = tmp_path / "killed", tmp_path / "killed" / "trials"
    with running_sweep(tmp_path, str(sweep), "--sweep-dir", str(killed)) as process:
        wait_for(lambda: (trials / "seed0" / "summary.json").exists(), process, "the first trial finished")
        wait_for(lambda: (trials / "seed1" / "checkpoints" / "last.pt").exists(), process, "the second one saved")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=TIMEOUT_S)
    assert not (trials / "seed1" / "summary.json").exists(), "the second trial finished before the kill"
    first = (trials / "seed0" / "summary.json").stat()

    again = sweep_cli(tmp_path, str(sweep), "--sweep-dir", str(killed))  # waits for the killed sweep's trial to end
    assert again.returncode == 0, again.stdout + again.stderr
    assert "done before seed0" in again.stdout and "done seed1" in again.stdout
    after = (trials / "seed0" / "summary.json").stat()
    assert (after.st_ino, after.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)  # not run again
    assert "resuming" in (trials / "seed1.log").read_text()  # continued from its checkpoint
    assert (trials / "seed0.log").read_text().count("# ") == 1  # one attempt only

    got = trial_rows(killed)
    assert [r["status"] for r in got.values()] == ["done", "done"]
    # the finished trial's row holds what its untouched run wrote ...
    summary = json.loads((trials / "seed0" / "summary.json").read_text())
    assert [float(got["seed0"][m]) for m in ("test.accuracy", "test.loss", "best.val_accuracy")] == [
        summary["test"]["accuracy"], summary["test"]["loss"], summary["best"]["val_accuracy"]]  # fmt: skip
    # ... and the interrupted trial's figures are those of the same trial in a sweep never interrupted (seed 1
    # alone, the module's `uninterrupted` sweep: the same trial, one process fewer than running seed 0 once more)
    expected = trial_rows(uninterrupted)
    assert list(expected) == ["seed1"] and expected["seed1"]["overrides"] == got["seed1"]["overrides"]
    for metric in ("test.accuracy", "test.loss", "best.val_accuracy"):
        assert got["seed1"][metric] == expected["seed1"][metric], metric


@pytest.mark.slow
def test_a_finished_trial_the_sweep_file_now_sets_differently_is_refused(tmp_path, uninterrupted):
    sweep_dir = tmp_path / "sw"
    shutil.copytree(uninterrupted, sweep_dir)  # a finished sweep of its own: the module's stays as it was
    tiny_beside(tmp_path)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(KILL_SWEEP.replace("seeds: [0, 1]", "seeds: [1]").replace("max_epochs: 3", "max_epochs: 2"))
    rows_before = (sweep_dir / "trials.csv").read_text()
    assert trial_rows(sweep_dir)["seed1"]["status"] == "done"
    res = sweep_cli(tmp_path, str(sweep), "--sweep-dir", "sw")
    assert res.returncode == 2 and "trial seed1" in res.stderr and "train.max_epochs=2" in res.stderr
    assert (sweep_dir / "trials.csv").read_text() == rows_before
