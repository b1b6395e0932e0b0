"""Warm-up counted in optimizer steps: no epoch at rate 0, and every shipped config learns in its first epoch."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import modforge as mf
from image_fixtures import MNIST_FILES, write_idx
from modforge.core.config import load_config
from modforge.experiment.runner import Experiment
from modforge.experiment.schema import validate_config
from modforge.train.optim_builder import build_scheduler, plan_schedule

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _warmup_configs() -> list[Path]:
    found = []
    for path in sorted(CONFIGS.rglob("*.yaml")):
        if "sweeps" in path.parts:
            continue
        spec = (load_config(path).data.get("train") or {}).get("scheduler") or {}
        if (spec.get("args") or {}).get("warmup"):
            found.append(path)
    return found


WARMUP_CONFIGS = _warmup_configs()


def _rates(spec: dict, *, epochs: int, steps_per_epoch: int, steps: int) -> list[float]:
    """The rate of each of the first ``steps`` optimizer steps, stepped the way the trainer does."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    plan = plan_schedule(spec, epochs=epochs, steps_per_epoch=steps_per_epoch)
    scheduler = build_scheduler(spec, optimizer, plan=plan)
    rates = []
    for step in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if plan.interval == "step" or (step + 1) % steps_per_epoch == 0:
            scheduler.step()
    return rates


def test_the_shipped_configs_with_a_warm_up_are_found():
    names = {p.relative_to(CONFIGS).as_posix() for p in WARMUP_CONFIGS}
    assert {"digits.yaml", "vision/base.yaml", "vision/tiny_imagenet.yaml", "detection/shapes_fcos.yaml"} <= names


@pytest.mark.parametrize("path", WARMUP_CONFIGS, ids=lambda p: p.relative_to(CONFIGS).as_posix())
def test_no_shipped_warm_up_spends_a_step_at_rate_zero_and_the_rate_rises_within_the_first_epoch(path):
    train = load_config(path).data["train"]
    rates = _rates(train["scheduler"], epochs=train["max_epochs"], steps_per_epoch=20, steps=20)
    assert min(rates) > 0, rates
    assert rates[-1] > rates[0], "the rate must move within the first epoch"


def test_an_epoch_warm_up_is_converted_to_optimizer_steps():
    spec = {"type": "warmup_cosine", "args": {"warmup": 1}, "interval": "epoch"}
    plan = plan_schedule(spec, epochs=3, steps_per_epoch=4)
    assert (plan.interval, plan.total_steps, plan.warmup_unit) == ("step", 12, 4)
    rates = _rates(spec, epochs=3, steps_per_epoch=4, steps=12)
    assert rates[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert rates[4] == pytest.approx(1.0) and all(a > b for a, b in zip(rates[4:], rates[5:], strict=False))
    half = _rates({**spec, "args": {"warmup": 0.5}}, epochs=3, steps_per_epoch=4, steps=3)
    assert half == pytest.approx([0.5, 1.0, 1.0])


def test_a_torch_schedule_keeps_the_configs_unit():
    spec = {"type": "step_lr", "args": {"step_size": 1, "gamma": 0.5}, "interval": "epoch"}
    assert plan_schedule(spec, epochs=5, steps_per_epoch=7) == mf.train.optim_builder.SchedulePlan("epoch", 5, 1)
    assert _rates(spec, epochs=5, steps_per_epoch=2, steps=4) == pytest.approx([1.0, 1.0, 0.5, 0.5])


def _scheduler(unit: int, total: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    spec = {"type": "warmup_cosine", "args": {"warmup": 1}, "interval": "epoch"}
    return optimizer, build_scheduler(spec, optimizer, plan=plan_schedule(spec, epochs=total, steps_per_epoch=unit))


def test_resumed_with_another_number_of_steps_per_epoch_the_position_is_carried_over_in_epochs(caplog):
    optimizer, two_processes = _scheduler(unit=4, total=5)  # 4 steps an epoch, 2 epochs done
    for _ in range(8):
        optimizer.step()
        two_processes.step()
    optimizer, one_process = _scheduler(unit=8, total=5)
    with caplog.at_level(logging.WARNING, logger="modforge.train"):
        one_process.load_state_dict(two_processes.state_dict())
    assert one_process.last_epoch == 16 and one_process.follows_epochs
    assert optimizer.param_groups[0]["lr"] == pytest.approx(one_process.factor(16))
    assert "40 optimizer steps (warm-up 8, 8 per epoch)" in caplog.text


def test_a_checkpoint_that_counted_epochs_resumes_at_the_same_epoch():
    optimizer, scheduler = _scheduler(unit=10, total=5)
    old = {**scheduler.state_dict(), "last_epoch": 2, "total_steps": 5, "warmup": 1}  # round 3: epochs, no warmup_unit
    del old["warmup_unit"]
    scheduler.load_state_dict(old)
    assert scheduler.last_epoch == 20 and scheduler.total_steps == 50


def _digits_idx(root: Path) -> None:
    """scikit-learn's handwritten digits as a 28×28 MNIST-family corpus (real, learnable pictures)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    big = np.kron(digits.images / 16.0 * 255, np.ones((3, 3))).astype(np.uint8)  # 24×24
    pictures = np.pad(big, ((0, 0), (2, 2), (2, 2)))
    labels = digits.target.astype(np.uint8)
    arrays = [pictures[:1500], labels[:1500], pictures[1500:], labels[1500:]]
    for name, array in zip(MNIST_FILES, arrays, strict=True):
        write_idx(root / name, array)


def _first_epoch(cfg) -> tuple[float, dict]:
    """(loss of the untrained model on the training split, the history row of the first epoch of the
    config's own plan)."""
    exp = Experiment.build(cfg)
    train_loader, val_loader, _ = exp.loaders()
    trainer = exp.trainer(train_loader, None)
    exp.model.eval()
    with torch.no_grad():
        before = [float(exp.model(trainer.prepare_batch(batch))["loss"]) for batch in train_loader]
    trainer.max_epochs = 1  # the first epoch of the full plan (the schedule was planned for all of them)
    trainer.fit(train_loader, val_loader)
    return sum(before) / len(before), trainer.history[0]


@pytest.mark.parametrize("config", ["digits.yaml", "vision/fashion_mnist.yaml"])
def test_the_first_epoch_of_the_demo_and_the_mnist_family_config_learns(config, tmp_path):
    overrides = ["train.progress=never", "train.callbacks=[]"]
    if config != "digits.yaml":
        _digits_idx(tmp_path)
        overrides += [f"data.args.root={tmp_path}", "train.num_threads=2"]
    initial, first = _first_epoch(validate_config(load_config(CONFIGS / config, overrides)))
    # at rate 0 (round 3's plan) the epoch's loss stays at the untrained model's and accuracy at chance (0.1)
    assert first["train_loss"] < initial - 0.02 and first["val_accuracy"] > 0.25, (initial, first)
