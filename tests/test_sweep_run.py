"""Real sweeps of tiny digits runs: a failing trial recorded while the others finish, and a
sweep SIGKILLed part-way then run again — finished trials untouched (their rows what their runs
wrote), the interrupted one resumed, its metrics equal to an uninterrupted sweep's."""

from __future__ import annotations

import json
import os
import signal

import pytest

from sweep_helpers import SHIPPED_DIGITS, TIMEOUT_S, running_sweep, sweep_cli, trial_rows, wait_for

DIGITS = SHIPPED_DIGITS  # each test's copy beside its sweep files, once its fixture `sweep_digits` ran
pytestmark = pytest.mark.usefixtures("sweep_digits")


@pytest.mark.slow
def test_a_failing_trial_is_recorded_with_its_error_and_the_others_finish(tmp_path):
    sweep = tmp_path / "fail.yaml"
    sweep.write_text(f"""
config: {DIGITS}
overrides: {{train.max_epochs: 1}}
grid:
  variant:
    ok: {{}}
    bad: {{model.backbone.args.channels: abc}}
seeds: [0]
collect: [test.accuracy, {{name: seconds, goal: none}}]
""")
    res = sweep_cli(tmp_path, str(sweep), "--workers", "2", "--sweep-dir", "sw")
    assert res.returncode == 1, res.stderr
    rows = trial_rows(tmp_path / "sw")
    assert list(rows) == ["ok-seed0", "bad-seed0"]
    ok, bad = rows["ok-seed0"], rows["bad-seed0"]
    assert ok["status"] == "done" and 0.0 < float(ok["test.accuracy"]) <= 1.0 and float(ok["seconds"]) > 0
    assert ok["overrides"] == "train.max_epochs=1 --seed 0" and ok["variant"] == "ok" and ok["seed"] == "0"
    assert bad["status"] == "failed" and bad["test.accuracy"] == ""
    assert bad["error"].startswith("model.backbone.args.channels: expected") and "\n" not in bad["error"]
    assert "failed bad-seed0: model.backbone.args.channels" in res.stdout
    summary = json.loads((tmp_path / "sw" / "trials" / "ok-seed0" / "summary.json").read_text())
    assert summary["test"]["accuracy"] == float(ok["test.accuracy"])
    assert (tmp_path / "sw" / "trials" / "bad-seed0.log").read_text().count("error:") == 1
    results = (tmp_path / "sw" / "results.md").read_text()
    assert "| `ok` | 1 |" in results and "| `bad` | 0 (1 failed) | – | – |" in results
    assert (tmp_path / "sw" / "results.png").is_file() and (tmp_path / "sw" / "sweep.yaml").is_file()


KILL_SWEEP = """
config: digits.yaml
overrides: {train.max_epochs: 3, data.batch_size: 16, train.callbacks: [], model.backbone.args.channels: [8, 16],
            train.num_threads: 1}
seeds: [0, 1]
collect: [test.accuracy, test.loss, best.val_accuracy]
"""


@pytest.mark.slow
def test_a_sweep_killed_part_way_continues_without_rerunning_finished_trials(tmp_path):
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
    # alone: the same trial, one process fewer than running seed 0 once more)
    alone = tmp_path / "seed1.yaml"
    alone.write_text(KILL_SWEEP.replace("seeds: [0, 1]", "seeds: [1]"))
    reference = sweep_cli(tmp_path, str(alone), "--sweep-dir", "whole")
    assert reference.returncode == 0, reference.stderr
    expected = trial_rows(tmp_path / "whole")
    assert list(expected) == ["seed1"] and expected["seed1"]["overrides"] == got["seed1"]["overrides"]
    for metric in ("test.accuracy", "test.loss", "best.val_accuracy"):
        assert got["seed1"][metric] == expected["seed1"][metric], metric


@pytest.mark.slow
def test_a_finished_trial_the_sweep_file_now_sets_differently_is_refused(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"config: {DIGITS}\noverrides: {{train.max_epochs: 1}}\nseeds: [0]\ncollect: [test.accuracy]\n")
    assert sweep_cli(tmp_path, str(sweep), "--sweep-dir", "sw").returncode == 0
    rows_before = (tmp_path / "sw" / "trials.csv").read_text()
    sweep.write_text(sweep.read_text().replace("max_epochs: 1", "max_epochs: 2"))
    res = sweep_cli(tmp_path, str(sweep), "--sweep-dir", "sw")
    assert res.returncode == 2 and "trial seed0" in res.stderr and "train.max_epochs=2" in res.stderr
    assert (tmp_path / "sw" / "trials.csv").read_text() == rows_before
