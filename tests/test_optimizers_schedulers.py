"""Every registered optimizer and scheduler builds from a config spec and really works."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import modforge as mf

# Values for the arguments torch's schedulers require (no default).
SCHEDULER_REQUIRED = {
    "step_size": 1,
    "milestones": [1, 2],
    "T_max": 5,
    "T_0": 2,
    "base_lr": 0.01,
    "max_lr": 0.1,
    "gamma": 0.5,
}
SCHEDULER_EXTRA: dict[str, dict] = {}


def model_and_loss():
    torch.manual_seed(0)
    model = nn.Linear(4, 3, bias=False)  # 2-D weights only: every optimizer (Muon too) accepts them
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    return model, lambda: nn.functional.cross_entropy(model(x), y)


@pytest.mark.parametrize("name", mf.OPTIMIZERS.list())
def test_optimizer_builds_from_defaults_and_updates_parameters(name):
    model, loss_fn = model_and_loss()
    optimizer = mf.OPTIMIZERS.build(name, params=model.parameters())
    before = model.weight.detach().clone()

    def closure():
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    optimizer.step(closure)
    assert not torch.equal(before, model.weight), f"{name} did not change the weights"
    assert torch.isfinite(model.weight).all()


def test_optimizer_arguments_are_coerced_from_config_values():
    model, _ = model_and_loss()
    opt = mf.OPTIMIZERS.build(
        {"type": "adamw", "args": {"lr": "3e-4", "betas": [0.8, 0.9], "weight_decay": 0}}, params=model.parameters()
    )
    group = opt.param_groups[0]
    assert group["lr"] == 3e-4 and tuple(group["betas"]) == (0.8, 0.9) and group["weight_decay"] == 0.0


def test_expected_optimizers_and_schedulers_are_registered():
    assert {"sgd", "adam", "adamw", "rmsprop", "adagrad", "lbfgs"} <= set(mf.OPTIMIZERS.list())
    assert {"step_lr", "multi_step_lr", "cosine_annealing_lr", "one_cycle_lr", "reduce_lr_on_plateau"} <= set(
        mf.SCHEDULERS.list()
    )
    assert "sparseadam" not in mf.OPTIMIZERS and "lambda_lr" not in mf.SCHEDULERS


@pytest.mark.parametrize("name", mf.SCHEDULERS.list())
def test_scheduler_builds_and_changes_the_learning_rate(name):
    model, loss_fn = model_and_loss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    required = [a.name for a in mf.SCHEDULERS.signature(name).user_args if a.required]
    missing = [r for r in required if r not in SCHEDULER_REQUIRED]
    assert not missing, f"add test values for {name}'s required arguments {missing}"
    args = {r: SCHEDULER_REQUIRED[r] for r in required} | SCHEDULER_EXTRA.get(name, {})
    scheduler = mf.SCHEDULERS.build({"type": name, "args": args}, optimizer=optimizer, total_steps=12)
    lrs = []
    for _ in range(12):
        optimizer.zero_grad()
        loss_fn().backward()
        optimizer.step()
        scheduler.step(1.0) if name == "reduce_lr_on_plateau" else scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    assert len(set(lrs)) > 1, f"{name} never changed the learning rate: {lrs}"
    assert all(lr >= 0 for lr in lrs)


def test_snake_case_names():
    from modforge.train.schedulers import snake_case

    assert snake_case("ReduceLROnPlateau") == "reduce_lr_on_plateau"
    assert snake_case("CosineAnnealingWarmRestarts") == "cosine_annealing_warm_restarts"
    assert snake_case("OneCycleLR") == "one_cycle_lr"
