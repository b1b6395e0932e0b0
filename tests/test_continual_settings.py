"""Continual settings beyond clean task boundaries: forward transfer, anytime accuracy, the online
one-pass stream and blurry boundaries — each measured in a real run and checked for what it counts."""

from __future__ import annotations

import json

import pytest
import torch

from modforge.continual.benchmarks import seq_digits
from modforge.continual.blurry import blurry_assignment, blurry_tasks
from modforge.continual.evaluation import forward_transfer
from run_configs import continual_digits

CONTINUAL = continual_digits(keep_last=50, continual="{algorithm: sgd, epochs_per_task: 1, eval_every: 4}")


@pytest.fixture
def config(write):
    return write("seq.yaml", CONTINUAL)


def _summary(tmp_path, run: str) -> dict:
    return json.loads((tmp_path / run / "summary.json").read_text())


def _train_sizes(blurry: float = 0.0) -> list[int]:
    tasks = seq_digits(seed=0, as_image=False).tasks
    return [len(t) for t in blurry_tasks([t.train for t in tasks], blurry, 0)]


def test_forward_transfer_anytime_accuracy_and_stream_counts(cli, config, tmp_path):
    res = cli("train", str(config), "--run-dir", "run")
    assert res.code == 0, res.err
    summary = _summary(tmp_path, "run")
    for name in ("class_il", "task_il"):
        part = summary[name]
        assert len(part["initial"]) == 5 and len(part["before_task"]) == 4
        expected = sum(part["before_task"][j - 1] - part["initial"][j] for j in range(1, 5)) / 4
        assert part["forward_transfer"] == pytest.approx(expected, abs=1e-12)
    # class-IL: before training, a task's classes compete only with the earlier tasks' — an untrained
    # head on 2 new classes among 2(j+1): the SGD model, trained on the others, predicts them (~0 %)
    assert max(summary["class_il"]["before_task"]) < 0.2
    sizes = _train_sizes()
    assert summary["samples_seen"] == sizes  # one epoch per task: every training sample once
    steps = [-(-n // 32) for n in sizes]
    anytime = summary["anytime"]
    assert [r["step"] for r in anytime] == list(range(4, sum(steps) + 1, 4))
    assert [r["task"] for r in anytime] == sorted(r["task"] for r in anytime) and anytime[-1]["task"] == 5
    if sum(steps) % 4 == 0:  # the last record is the final model on all five tasks: the matrix's last row
        last = summary["class_il"]["matrix"][-1]
        assert anytime[-1]["class_il"] == pytest.approx(sum(last) / 5, abs=1e-12)
    assert (tmp_path / "run" / "cl_anytime.png").stat().st_size > 0


def test_a_resumed_run_has_the_same_anytime_records_and_transfer(cli, config, tmp_path):
    res = cli("train", str(config), "--run-dir", "reference")
    assert res.code == 0, res.err
    middle = tmp_path / "reference" / "checkpoints" / "epoch0001-step0000012.pt"  # inside task 2
    state = torch.load(middle, weights_only=True)
    assert state["batch_in_epoch"] and len(state["continual"]["anytime"]) == state["global_step"] // 4
    res = cli("train", "--resume", str(middle), "--run-dir", "resumed")
    assert res.code == 0, res.err
    ours, theirs = _summary(tmp_path, "resumed"), _summary(tmp_path, "reference")
    for key in ("anytime", "class_il", "task_il", "samples_seen"):
        assert ours[key] == theirs[key], key


def test_online_sees_each_training_sample_once(cli, config, tmp_path):
    res = cli("train", str(config), "continual.online=true", "continual.eval_every=null",
              "continual.algorithm={type: er, args: {buffer_size: 50, minibatch_size: 10}}", "--run-dir", "run")
    assert res.code == 0, res.err
    summary = _summary(tmp_path, "run")
    assert summary["online"] is True and summary["samples_seen"] == _train_sizes()
    buffer = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)["algorithm"]["buffer"]
    assert buffer["seen"] == sum(_train_sizes())  # the replay buffer was offered every stream sample exactly once
    refused = cli("config", str(config), "continual.online=true", "continual.epochs_per_task=2")
    assert refused.code == 2 and "online: true sees every sample once: epochs_per_task must be 1, got 2" in refused.err


def test_blurry_boundaries_move_a_seeded_share_to_the_neighbours():
    def plain(plan):
        return [[(source, positions.tolist()) for source, positions in parts] for parts in plan]

    sizes = [100, 57, 80, 3]
    plan = blurry_assignment(sizes, 0.2, seed=4)
    assert plain(plan) == plain(blurry_assignment(sizes, 0.2, seed=4))
    assert plain(plan) != plain(blurry_assignment(sizes, 0.2, seed=5))
    placed = {}
    for t, parts in enumerate(plan):
        own_source, own = parts[0]
        assert own_source == t and len(own) == sizes[t] - round(0.2 * sizes[t])
        for source, positions in parts:
            assert abs(source - t) <= 1  # only to a neighbour
            for p in positions.tolist():
                assert (source, p) not in placed
                placed[(source, p)] = t
    assert len(placed) == sum(sizes)  # every sample in exactly one task
    assert all(t == 1 for (source, _), t in placed.items() if source == 0 and t != 0)  # the first: only forward
    assert plain(blurry_assignment(sizes, 0.0, seed=4)) == [[(t, list(range(n)))] for t, n in enumerate(sizes)]
    with pytest.raises(ValueError, match="blurry must be a fraction in"):
        blurry_assignment(sizes, 1.0, seed=0)


def test_a_blurry_run_trains_each_task_on_its_share_of_the_neighbours(cli, config, tmp_path):
    tasks = seq_digits(seed=0, as_image=False).tasks
    blurred = blurry_tasks([t.train for t in tasks], 0.25, 0)
    first = set(blurred[0].labels.tolist())
    assert set(tasks[0].classes) < first and first <= set(tasks[0].classes) | set(tasks[1].classes)
    res = cli("train", str(config), "continual.blurry=0.25", "continual.eval_every=null", "--run-dir", "run")
    assert res.code == 0, res.err
    summary = _summary(tmp_path, "run")
    assert summary["blurry"] == 0.25 and summary["samples_seen"] == [len(b) for b in blurred]
    assert sum(summary["samples_seen"]) == sum(len(t.train) for t in tasks)


@pytest.mark.parametrize(("override", "message"), [
    ("continual.blurry=1.0", "blurry must be a fraction in [0, 1), got 1.0"),
    ("continual.eval_every=0", "eval_every must be a number of steps (>= 1) or null, got 0"),
])  # fmt: skip
def test_bad_settings_fail_at_validation(cli, config, override, message):
    res = cli("config", str(config), override)
    assert res.code == 2 and message in res.err


def test_forward_transfer_by_hand():
    assert forward_transfer([0.1, 0.5, 0.2], [0.3, 0.05, 0.1, 0.2]) == pytest.approx(((0.1 - 0.05) + (0.5 - 0.1)
                                                                                       + (0.2 - 0.2)) / 3)
    assert forward_transfer([], [0.2]) != forward_transfer([], [0.2])  # NaN: nothing to compare
