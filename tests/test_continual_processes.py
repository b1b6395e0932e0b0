"""Continual runs over several processes (``--nproc``, gloo on the CPU): each method whose loss is
a mean over samples trains on 2 processes as on one with twice the batch — the same accuracy
matrices and weights within float tolerance — a 2-process run resumed at a task boundary ends
bitwise where the uninterrupted one does, and the methods that cannot be split are refused with
their reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distributed_helpers import modforge, torchrun

WORKER = Path(__file__).with_name("continual_worker.py")
# one of each way a method touches the processes: a buffer with logits and two replay draws (derpp),
# labels gathered for a mask (er_ace), gradients it averages itself (agem), exemplars drawn and
# herded at task ends (icarl), a memory filled from the gathered stream and fitted at task ends (gdumb)
METHODS = ("derpp", "er_ace", "agem", "icarl", "gdumb")
CONFIG = """
seed: 0
data: {{type: seq_digits, args: {{as_image: false}}, batch_size: {batch}, drop_last: true}}
model:
  backbone: {{type: mlp, args: {{hidden_dims: [32]}}}}
  head: linear
  losses: [cross_entropy]
train:
  optimizer: {{type: sgd, args: {{lr: 0.1}}}}
  checkpoint: {{keep_last: 50}}
  num_threads: 1
  progress: never
  distributed: {{timeout: 60}}
continual: {{algorithm: {{type: {method}, args: {args}}}, epochs_per_task: 1}}
"""
ARGS = {"gdumb": "{buffer_size: 100, fitting_epochs: 2}"}


def _write(folder: Path, method: str, batch: int) -> None:
    folder.mkdir(exist_ok=True)
    args = ARGS.get(method, "{buffer_size: 100}")
    (folder / f"{method}.yaml").write_text(CONFIG.format(batch=batch, method=method, args=args))


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.pt", map_location="cpu", weights_only=True)["model"]


def _boundary(run: Path, tasks_done: int) -> Path:
    """The checkpoint written at the end of task ``tasks_done`` (its evaluation done, the next task begun)."""
    for path in sorted((run / "checkpoints").glob("epoch*.pt")):
        payload = torch.load(path, map_location="cpu", weights_only=True)
        if payload["continual"]["tasks_done"] == tasks_done and not payload.get("batch_in_epoch"):
            return path
    raise AssertionError(f"no checkpoint at the end of task {tasks_done} in {run}")


@pytest.mark.slow
def test_two_processes_train_a_continual_method_as_one_process_with_twice_the_batch(cli, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for method in METHODS:
        _write(one, method, batch=20)
        _write(two, method, batch=10)  # per process
    _write(two, "xder", batch=10)
    res = torchrun(2, str(WORKER), str(two), *METHODS, "xder", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    refused = (two / "xder.refused").read_text()
    assert "algorithm 'xder' trains in one process only" in refused and "hinges" in refused
    assert not (two / "xder").exists()  # refused before its folder was made

    for method in METHODS:
        assert cli("train", str(one / f"{method}.yaml"), "--run-dir", str(one / method)).code == 0, method
        single = json.loads((one / method / "summary.json").read_text())
        double = json.loads((two / method / "summary.json").read_text())
        assert double["processes"] == 2 and "processes" not in single
        assert double["samples_seen"] == single["samples_seen"], method  # every process's share counted
        for setting in ("class_il", "task_il"):
            for row_one, row_two in zip(single[setting]["matrix"], double[setting]["matrix"], strict=True):
                assert row_two == pytest.approx(row_one, abs=1e-9), (method, setting)
        for key, value in _weights(one / method).items():
            torch.testing.assert_close(_weights(two / method)[key], value, rtol=1e-4, atol=1e-5, msg=method)
    assert json.loads((one / "derpp" / "summary.json").read_text())["task_il"]["average_accuracy"] > 0.7  # it learned

    # a 2-process run resumed from its checkpoint at the end of task 2 ends bitwise where it ended
    resumed = modforge("train", "--resume", str(_boundary(two / "derpp", 2)), "--run-dir", "resumed", "--nproc", "2",
                       cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    for key, value in _weights(two / "derpp").items():
        assert torch.equal(_weights(tmp_path / "resumed")[key], value), key
    final, again = (json.loads((run / "summary.json").read_text()) for run in (two / "derpp", tmp_path / "resumed"))
    assert again["class_il"]["matrix"] == final["class_il"]["matrix"]
    assert again["task_il"]["matrix"] == final["task_il"]["matrix"]


def test_one_process_draws_and_shares_as_before_and_n_processes_share_equally():
    from modforge.continual.processes import Processes

    alone = Processes()
    rows = {"input": torch.arange(12).reshape(6, 2), "label": torch.arange(6)}
    assert alone.draw_size(10, 6) == 6 and alone.draw_size(4, 6) == 4
    assert alone.share(rows)["label"].tolist() == list(range(6))
    second = Processes(world_size=3, rank=1)
    assert second.draw_size(4, 100) == 12  # 3 × the per-process minibatch
    assert second.draw_size(4, 7) == 6  # what is held, rounded down to equal shares
    assert second.draw_size(4, 2) == 0  # fewer than one each: nothing replayed this step
    assert second.share(rows)["label"].tolist() == [2, 3] and second.share(rows)["input"].shape == (2, 2)
    with pytest.raises(ValueError, match="cannot be shared equally by 3 processes"):
        second.share({"label": torch.arange(4)})
    with pytest.raises(ValueError, match="rank 3 of 3 processes is not a process"):
        Processes(world_size=3, rank=3)
