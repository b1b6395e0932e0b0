"""Multi-process runs from the command line (torchrun, gloo on the CPU): a 2-process run writes
once and tests like one process; one process killed ends the run and --resume continues
exactly; a silent process ends it after the configured timeout; checkpoints resume
mid-epoch with another number of processes; only `train` runs under torchrun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from distributed_helpers import DIGITS, ENV, alive, modforge, rank_pid, torchrun


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One 2-epoch digits run of 2 processes (``modforge train --nproc 2``) and its command's result,
    trained once for the tests below: the first checks the run itself, the kill test compares its
    resumed run with it, the mid-epoch test resumes its checkpoint of step 30 into folders of its own."""
    folder = tmp_path_factory.mktemp("two-processes")
    (folder / "digits.yaml").write_text(DIGITS)
    res = modforge("train", "digits.yaml", "--run-dir", "run", "--nproc", "2", cwd=folder)
    return folder / "run", res


@pytest.mark.slow
def test_a_two_process_run_writes_once_and_tests_like_one_process(cli, two_process_run):
    run, res = two_process_run
    assert res.returncode == 0, res.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["epochs"] == 2
    assert summary["steps"] == 2 * 40  # 1,257 training samples / (16 × 2) per step
    assert res.stderr.count("run folder:") == 1 and res.stderr.count("epoch 2/2") == 1  # rank 0 speaks
    lines = (run / "metrics.csv").read_text().splitlines()
    assert len(lines) == 3  # a header and two epochs, written once
    # the test split evaluated in two shards, combined: what one process computes on all of it
    single = cli("test", str(run))  # one process: this one (the same command; a child would import for seconds first)
    assert single.code == 0, single.err
    record = json.loads((run / "evaluations" / "best-test.json").read_text())
    for metric in ("accuracy", "loss", "macro_f1"):
        assert summary["test"][metric] == pytest.approx(record[metric], abs=1e-6), metric
    assert summary["test"]["accuracy"] > 0.8


@pytest.mark.slow
def test_killing_one_process_ends_the_run_and_resume_continues_exactly(two_process_run, tmp_path):
    reference, trained = two_process_run  # the same config on 2 processes, never stopped
    assert trained.returncode == 0, trained.stderr
    (tmp_path / "digits.yaml").write_text(DIGITS)
    train = ["-m", "modforge", "train", "digits.yaml"]
    launcher = torchrun(2, *train, "--run-dir", "killed", cwd=tmp_path, wait=False)
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 120
    # killed after its checkpoint of step 10: 70 of its 80 steps still to go (with 3 epochs it waited for
    # step 30, 90 to go), so the run is surely still training when its process is killed
    while not any(checkpoints.glob("epoch*-step0000010.pt")) and launcher.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    victim = rank_pid(launcher.pid, 1)
    assert victim is not None and launcher.poll() is None
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    code = launcher.wait(timeout=120)
    stderr = launcher.stderr.read()
    assert code != 0 and time.monotonic() - killed_at < 60  # the survivor does not wait forever
    assert "another process of this run" in stderr  # the survivor's own message, not only torchrun's
    assert not (tmp_path / "killed" / "summary.json").exists()
    resumed = modforge("train", "--resume", "killed", "--nproc", "2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    ours = torch.load(tmp_path / "killed" / "checkpoints" / "last.pt", weights_only=True)
    theirs = torch.load(reference / "checkpoints" / "last.pt", weights_only=True)
    assert all(torch.equal(ours["model"][k], theirs["model"][k]) for k in theirs["model"])
    assert all(torch.equal(ours["ema"]["average"][k], theirs["ema"]["average"][k]) for k in theirs["model"])
    assert [r["train_loss"] for r in ours["history"]] == pytest.approx([r["train_loss"] for r in theirs["history"]])


@pytest.mark.slow
def test_a_checkpoint_resumes_mid_epoch_with_another_number_of_processes(cli, two_process_run, tmp_path):
    run, res = two_process_run
    assert res.returncode == 0, res.stderr
    middle = run / "checkpoints" / "epoch0000-step0000030.pt"  # 30 of the first epoch's 40 steps, 2 processes
    assert middle.exists()
    # 2 → 1 mid-epoch: the epoch's other 1,257 − 30 × 32 = 297 samples in 19 steps of 16 (--epochs 1: the
    # first epoch is finished, which is all the mid-epoch resume is about)
    one = cli("train", "--resume", str(middle), "--run-dir", "one", "--epochs", "1")  # one process: this one
    assert one.code == 0, one.err
    assert "resuming a 2-process checkpoint with 1 process" in one.err
    assert json.loads((tmp_path / "one" / "summary.json").read_text())["steps"] == 30 + 19
    # 2 → 3 mid-epoch: 297 samples over 3 processes (99 each, equal shards: 7 steps), ending the first epoch
    three = modforge("train", "--resume", str(middle), "--run-dir", "three", "--epochs", "1", "--nproc", "3",
                      cwd=tmp_path)
    assert three.returncode == 0, three.stderr
    assert "resuming a 2-process checkpoint with 3 processes" in three.stderr
    assert json.loads((tmp_path / "three" / "summary.json").read_text())["steps"] == 30 + 7
    # and back from 1 to 2 processes at an epoch boundary: the second epoch in 40 steps of 16 × 2
    back = modforge("train", "--resume", "one", "--epochs", "2", "--nproc", "2", cwd=tmp_path)
    assert back.returncode == 0, back.stderr
    assert "resuming a 1-process checkpoint with 2 processes" in back.stderr
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["epochs"] == 2 and summary["steps"] == 30 + 19 + 40
    assert summary["test"]["accuracy"] > 0.8


@pytest.mark.slow
def test_a_silent_process_ends_the_run_after_the_configured_timeout(tmp_path):
    (tmp_path / "digits.yaml").write_text(DIGITS.replace("distributed: {timeout: 60}", "distributed: {timeout: 4}"))
    launcher = torchrun(2, "-m", "modforge", "train", "digits.yaml", "--run-dir", "run", cwd=tmp_path, wait=False)
    deadline = time.monotonic() + 120
    while not any((tmp_path / "run" / "checkpoints").glob("epoch*-step0000010.pt")):  # 70 of 80 steps to go
        assert time.monotonic() < deadline and launcher.poll() is None, "no checkpoint appeared"
        time.sleep(0.01)
    first, silent = rank_pid(launcher.pid, 0), rank_pid(launcher.pid, 1)
    os.kill(silent, signal.SIGSTOP)  # alive but answering nothing
    stopped = time.monotonic()
    while alive(first) and time.monotonic() - stopped < 60:
        time.sleep(0.05)
    waited = time.monotonic() - stopped
    os.kill(silent, signal.SIGKILL)
    launcher.wait(timeout=120)
    stderr = launcher.stderr.read()
    assert 3.5 < waited < 30, waited  # the configured 4 s, not forever
    assert "another process of this run stopped answering or failed" in stderr and "Timed out" in stderr
    assert "modforge train --resume run" in stderr


def test_only_train_runs_under_torchrun_and_nproc_is_checked(cli, monkeypatch, write):
    config = write("digits.yaml", DIGITS)
    res = cli("train", str(config), "--nproc", "zero")
    assert res.code == 2 and "--nproc needs a number of processes, got 'zero'" in res.err
    res = cli("train", str(config), "--nproc=0")
    assert res.code == 2 and "--nproc must be at least 1, got 0" in res.err
    monkeypatch.setenv("WORLD_SIZE", "2")
    res = cli("train", str(config), "--nproc", "2")
    assert res.code == 2 and "this process already runs under torchrun" in res.err
    res = cli("kfold", str(config))
    assert res.code == 2 and "'modforge kfold' runs in one process" in res.err


# `modforge ARGS` in a fresh interpreter whose os.execve, instead of becoming the program, prints
# what it was given and whether torch was imported by then, and ends the process
_EXEC_SEEN = """
import json, os, runpy, sys
def execve(path, argv, env):
    print("EXECVE " + json.dumps({"torch": "torch" in sys.modules, "argv": list(argv)}), flush=True)
    os._exit(0)
os.execve = execve
sys.argv = ["modforge", *sys.argv[1:]]
runpy.run_module("modforge", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("command", [["train", "digits.yaml", "--run-dir", "run"], ["train", "--resume", "old"]],
                         ids=["train", "resume"])
def test_nproc_becomes_torchrun_without_importing_torch(tmp_path, command):
    """``--nproc N`` only builds torchrun's command line and becomes it (torchrun and its workers
    import torch themselves): the launching process never imports torch, which would cost seconds
    and memory for nothing — nor does ``--resume``'s check of the run folder before it. A fresh
    interpreter (this one has torch loaded), stopped at its execve."""
    (tmp_path / "digits.yaml").write_text(DIGITS)
    (tmp_path / "old").mkdir()  # the folder --resume names: checked (links, odd entries) before the launch
    res = subprocess.run([sys.executable, "-c", _EXEC_SEEN, *command, "--nproc", "2"], cwd=tmp_path, env=ENV,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    seen = json.loads(next(line for line in res.stdout.splitlines() if line.startswith("EXECVE "))[len("EXECVE "):])
    assert "modforge.train.distributed" in seen["argv"] and "--nproc-per-node=2" in seen["argv"]
    assert seen["argv"][-len(command):] == command  # the workers' command: no --nproc
    assert seen["torch"] is False  # nothing on the way to torchrun imported it
    assert not (tmp_path / "run").exists()
