"""Warm trial starts (:mod:`modforge.cli.trial_server`): a local sweep forks its trials from one
process that imported torch and modforge once. A forked trial is its own process in its own session
whose output goes to its log; if the server dies its trials die with it, and the sweep goes on with
fresh processes; a command that is not modforge's starts fresh. (That a warm trial reaches a cold
one's figures is held by test_sweep_run's kill test, whose reference sweep runs ``--cold-trials``.)"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from distributed_helpers import children
from sweep_helpers import running_sweep, tiny_beside, trial_rows, wait_for


def _server(sweep_pid: int) -> int | None:
    for pid in children(sweep_pid):
        try:
            if b"modforge.cli.trial_server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.slow
def test_a_trial_forked_warm_is_its_own_process_and_dies_with_its_server_then_trials_start_cold(tmp_path):
    tiny_beside(tmp_path)
    sweep = tmp_path / "s.yaml"
    sweep.write_text("config: tiny.yaml\noverrides: {train.max_epochs: 200, train.num_threads: 1}\n"
                     "grid: {variant: {long: {}, short: {train.max_epochs: 1}}}\nseeds: [0]\ncollect: [test.accuracy]\n")  # fmt: skip
    trials = tmp_path / "sw" / "trials"
    with running_sweep(tmp_path, str(sweep), "--sweep-dir", "sw") as process:
        wait_for(lambda: any((trials / "long-seed0" / "checkpoints").glob("*.pt")), process, "the first checkpoint")
        server = _server(process.pid)
        assert server is not None, "no trial server among the sweep's processes"
        (trial,) = [pid for pid in children(server) if _parent(pid) == server]
        assert os.getsid(trial) == trial and os.getpgid(trial) == trial  # a session of its own
        assert os.readlink(f"/proc/{trial}/fd/1") == str(trials / "long-seed0.log")  # its output: its log
        assert os.readlink(f"/proc/{trial}/fd/2") == str(trials / "long-seed0.log")
        os.kill(server, signal.SIGKILL)
        out, _ = process.communicate(timeout=300)
    assert not (trials / "long-seed0" / "summary.json").exists()  # the server's death ended it
    rows = trial_rows(tmp_path / "sw")
    assert rows["long-seed0"]["status"] == "failed" and rows["short-seed0"]["status"] == "done", out
    assert "warm trial starts are off for this sweep" in out and "trials start as fresh processes" in out


def test_a_command_that_is_not_modforges_starts_cold():
    from modforge.sweep.warm_trials import WarmTrials

    started = []
    warm = WarmTrials(lambda: started.append("server"))
    assert warm.start(["/bin/true"], 1, ()) is None
    warm.close()
    assert started == []  # no server was started for it


def test_cold_trials_is_a_local_backend_flag(cli, tmp_path):
    tiny_beside(tmp_path)
    path = tmp_path / "s.yaml"
    path.write_text("config: tiny.yaml\nseeds: [0]\ncollect: [test.accuracy]\n")
    res = cli("sweep", str(path), "--backend", "ray", "--cold-trials", "--dry-run")
    assert res.code == 2 and "--cold-trials is for the local backend" in res.err
