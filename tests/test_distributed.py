"""Multi-process training on torch.distributed (gloo on the CPU, launched by torchrun):
sharded resumable sampling, DDP gradient equivalence, metrics combined from sums and
counts, rank-0-only files, one rank killed and the run resumed, 2 ↔ 1 process resumes."""

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

from modforge.data.loader import ResumableRandomSampler, ShardedSequentialSampler

WORKER = Path(__file__).with_name("distributed_worker.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

DIGITS = """
seed: 0
data: {type: digits, args: {as_image: false}, batch_size: 16}
model:
  backbone: {type: mlp, args: {hidden_dims: [32], dropout: 0.1}}
  head: linear
  losses: [cross_entropy]
train:
  max_epochs: 3
  optimizer: {type: sgd, args: {lr: 0.1, momentum: 0.9}}
  metrics: [accuracy, loss, macro_f1]
  checkpoint: {every_n_steps: 10, keep_last: 50}
  num_threads: 1
  progress: never
  distributed: {timeout: 60}
"""


def _torchrun(nproc: int, *args: str, cwd: Path, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    if wait:
        return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)
    return subprocess.Popen(command, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _modforge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "modforge", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=300)


# ------------------------------------------------------------------ samplers
def _shards(n: int, world: int, seed: int = 3, skip: int = 0) -> list[list[int]]:
    shards = []
    for rank in range(world):
        sampler = ResumableRandomSampler(n, torch.Generator().manual_seed(seed), world, rank)
        sampler.skip_next(skip)
        assert len(sampler) == len(order := list(sampler))
        shards.append(order)
    return shards


def test_shards_are_disjoint_and_cover_the_epoch_with_head_padding():
    full = _shards(11, 1)[0]
    assert sorted(full) == list(range(11))
    shards = _shards(11, 3)  # 11 → padded to 12: one sample of the permutation's head read twice
    assert [len(s) for s in shards] == [4, 4, 4]
    assert sorted(sum(shards, [])) == sorted(full + full[:1])
    assert shards[1] == (full + full[:1])[1::3]


def test_skipping_whole_epoch_samples_continues_each_shard_exactly():
    batch, world, done = 2, 2, 3  # three batches of two per process consumed: 12 samples of the epoch
    for rank, (whole, rest) in enumerate(zip(_shards(29, world), _shards(29, world, skip=done * batch * world),
                                             strict=True)):
        assert rest == whole[done * batch :], rank
    # the same checkpoint resumed by three processes: every remaining sample of the epoch, plus the
    # padding to a multiple of 3 (the permutation's head, as torch's DistributedSampler pads)
    full = _shards(29, 1)[0]
    rest = sum(_shards(29, 3, skip=12), [])
    assert sorted(rest) == sorted(full[12:] + full[:1])


def test_evaluation_shards_read_every_sample_once():
    shards = [list(ShardedSequentialSampler(10, 3, r)) for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    with pytest.raises(ValueError, match="rank 3 is not one of 3 processes"):
        ShardedSequentialSampler(10, 3, 3)


def test_collected_shards_are_put_back_in_data_order():
    from modforge.train.trainer import _interleave

    data = torch.arange(10)
    assert torch.equal(_interleave([data[r::3] for r in range(3)]), data)


# --------------------------------------------------------------- processes
@pytest.mark.slow
def test_one_ddp_step_of_two_processes_equals_one_step_on_the_whole_batch(tmp_path):
    res = _torchrun(2, str(WORKER), "step", str(tmp_path / "two.pt"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    single = subprocess.run([sys.executable, str(WORKER), "step", str(tmp_path / "one.pt")], env=ENV,
                            capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr
    two, one = torch.load(tmp_path / "two.pt"), torch.load(tmp_path / "one.pt")
    start = _worker().fixed_model().state_dict()
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-5, atol=1e-6)
        assert not torch.allclose(one[key], start[key]), f"{key} did not move: the step did nothing"


def _worker():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mf_test_distributed_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_metrics_of_two_processes_equal_one_process_on_all_the_data(tmp_path):
    res = _torchrun(2, str(WORKER), "metrics", str(tmp_path / "two.pt"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    single = subprocess.run([sys.executable, str(WORKER), "metrics", str(tmp_path / "one.pt")], env=ENV,
                            capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr
    two, one = torch.load(tmp_path / "two.pt"), torch.load(tmp_path / "one.pt")
    assert two["confusion_matrix"] == one["confusion_matrix"] and sum(map(sum, one["confusion_matrix"])) == 40
    for name in ("accuracy", "macro_f1", "eer", "min_dcf"):
        assert two[name] == pytest.approx(one[name]), name
    assert two["loss"] == pytest.approx(one["loss"] + 0.5)  # 20 samples at loss l, 20 at l + 1


@pytest.mark.slow
def test_a_two_process_run_writes_once_and_tests_like_one_process(tmp_path):
    (tmp_path / "digits.yaml").write_text(DIGITS)
    res = _modforge("train", "digits.yaml", "--run-dir", "run", "--nproc", "2", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["epochs"] == 3
    assert summary["steps"] == 3 * 40  # 1,257 training samples / (16 × 2) per step
    assert res.stderr.count("run folder:") == 1 and res.stderr.count("epoch 3/3") == 1  # rank 0 speaks
    lines = (run / "metrics.csv").read_text().splitlines()
    assert len(lines) == 4  # a header and three epochs, written once
    # the test split evaluated in two shards, combined: what one process computes on all of it
    single = _modforge("test", "run", cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    record = json.loads((run / "evaluations" / "best-test.json").read_text())
    for metric in ("accuracy", "loss", "macro_f1"):
        assert summary["test"][metric] == pytest.approx(record[metric], abs=1e-6), metric
    assert summary["test"]["accuracy"] > 0.8


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found += [int(entry.name), *_children(int(entry.name))]
    return found


def _rank_pid(launcher: int, rank: int) -> int | None:
    for pid in _children(launcher):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and b"LOCAL_RANK=" + str(rank).encode() in environ:
            return pid
    return None


@pytest.mark.slow
def test_killing_one_process_ends_the_run_and_resume_continues_exactly(tmp_path):
    (tmp_path / "digits.yaml").write_text(DIGITS)
    train = ["-m", "modforge", "train", "digits.yaml"]
    reference = _torchrun(2, *train, "--run-dir", "reference", cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr
    launcher = _torchrun(2, *train, "--run-dir", "killed", cwd=tmp_path, wait=False)
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 120
    while not any(checkpoints.glob("epoch*-step0000030.pt")) and launcher.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    victim = _rank_pid(launcher.pid, 1)
    assert victim is not None and launcher.poll() is None
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    code = launcher.wait(timeout=120)
    stderr = launcher.stderr.read()
    assert code != 0 and time.monotonic() - killed_at < 60  # the survivor does not wait forever
    assert "another process of this run" in stderr or "Signal 9 (SIGKILL) received by PID" in stderr
    assert not (tmp_path / "killed" / "summary.json").exists()
    resumed = _modforge("train", "--resume", "killed", "--nproc", "2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    ours = torch.load(tmp_path / "killed" / "checkpoints" / "last.pt", weights_only=True)
    theirs = torch.load(tmp_path / "reference" / "checkpoints" / "last.pt", weights_only=True)
    assert all(torch.equal(ours["model"][k], theirs["model"][k]) for k in theirs["model"])
    assert [r["train_loss"] for r in ours["history"]] == pytest.approx([r["train_loss"] for r in theirs["history"]])


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_in_one_process_and_back(tmp_path):
    (tmp_path / "digits.yaml").write_text(DIGITS)
    res = _modforge("train", "digits.yaml", "--run-dir", "run", "--epochs", "1", "--nproc", "2", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    middle = tmp_path / "run" / "checkpoints" / "epoch0000-step0000030.pt"  # 30 of the first epoch's 40 steps
    assert middle.exists()
    one = _modforge("train", "--resume", str(middle), "--run-dir", "one", "--epochs", "2", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert "resuming a 2-process checkpoint with 1 process" in one.stderr
    steps = json.loads((tmp_path / "one" / "summary.json").read_text())["steps"]
    assert steps == 30 + 19 + 79  # the epoch's other 1,257 − 30 × 32 = 297 samples in steps of 16, then a whole epoch
    back = _modforge("train", "--resume", "one", "--epochs", "3", "--nproc", "2", cwd=tmp_path)
    assert back.returncode == 0, back.stderr
    assert "resuming a 1-process checkpoint with 2 processes" in back.stderr
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["epochs"] == 3 and summary["test"]["accuracy"] > 0.8


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_a_silent_process_ends_the_run_after_the_configured_timeout(tmp_path):
    (tmp_path / "digits.yaml").write_text(DIGITS.replace("distributed: {timeout: 60}", "distributed: {timeout: 4}"))
    launcher = _torchrun(2, "-m", "modforge", "train", "digits.yaml", "--run-dir", "run", cwd=tmp_path, wait=False)
    deadline = time.monotonic() + 120
    while not any((tmp_path / "run" / "checkpoints").glob("epoch*-step0000030.pt")):
        assert time.monotonic() < deadline and launcher.poll() is None, "no checkpoint appeared"
        time.sleep(0.01)
    first, silent = _rank_pid(launcher.pid, 0), _rank_pid(launcher.pid, 1)
    os.kill(silent, signal.SIGSTOP)  # alive but answering nothing
    stopped = time.monotonic()
    while _alive(first) and time.monotonic() - stopped < 60:
        time.sleep(0.05)
    waited = time.monotonic() - stopped
    os.kill(silent, signal.SIGKILL)
    launcher.wait(timeout=120)
    stderr = launcher.stderr.read()
    assert 3.5 < waited < 30, waited  # the configured 4 s, not forever
    assert "another process of this run stopped answering" in stderr and "Timed out" in stderr
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
