"""Every numeric setting's range is checked when the config is validated, naming the key —
train settings, loader settings, optimizer/scheduler arguments (param groups too), the
device — and a refused config leaves nothing on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import modforge as mf
from modforge.core.errors import ConfigError
from modforge.experiment.schema import validate_config

BASE = """
seed: 0
data: {type: synthetic_classification, args: {num_samples: 120, num_features: 8, num_classes: 3}, batch_size: 16}
model: {backbone: {type: mlp, args: {hidden_dims: [8]}}, head: linear, losses: [cross_entropy]}
train:
  max_epochs: 1
  optimizer: {type: adamw, args: {lr: 1.0e-2}, param_groups: [{select: [bias], args: {weight_decay: 0.0}}]}
  scheduler: {type: warmup_cosine, args: {warmup: 2}, interval: epoch}
  num_threads: 1
  progress: never
"""


def _refused(write, override: str) -> str:
    cfg = mf.load_config(write("base.yaml", BASE))
    cfg.apply_overrides([override])
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    return str(info.value)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("train.grad_clip=-1", "train.grad_clip"),
        ("train.grad_clip=.nan", "train.grad_clip"),
        ("train.accumulate=0", "train.accumulate"),
        ("train.num_threads=-1", "train.num_threads"),
        ("train.max_steps=-1", "train.max_steps"),
        ("train.max_epochs=0", "train.max_epochs"),
        ("train.log_every=0", "train.log_every"),
        ("data.batch_size=9223372036854775808", "data.batch_size"),
        ("data.batch_size=0", "data.batch_size"),
        ("train.optimizer.args.lr=.inf", "train.optimizer.args.lr"),
        ("train.optimizer.args.lr=1.0e+39", "train.optimizer.args.lr"),
        ("train.optimizer.args.weight_decay=.inf", "train.optimizer.args.weight_decay"),
        ("train.optimizer.args.betas=[0.9,1.0]", "train.optimizer.args.betas"),
        ("train.optimizer.param_groups.0.args.weight_decay=-0.5", "train.optimizer.param_groups.0.args.weight_decay"),
        ("train.optimizer.param_groups.0.args.lr=.inf", "train.optimizer.param_groups.0.args.lr"),
        ("train.scheduler.args.warmup=-1", "train.scheduler.args.warmup"),
        ("train.scheduler={type: step_lr, args: {step_size: 0}}", "train.scheduler.args.step_size"),
        ("train.device=tpu", "train.device"),
        ("train.trainer=no_such_trainer", "train.trainer"),
    ],
)
def test_out_of_range_settings_are_refused_naming_the_key(write, override, key):
    message = _refused(write, override)
    assert message.startswith(f"{key}:") and f"override '{override}'" in message, message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_on_a_machine_without_it_is_refused(write):
    assert "no CUDA device" in _refused(write, "train.device=cuda")


def test_torch_classes_keep_working_under_their_ranges(write):
    cfg = validate_config(mf.load_config(write("base.yaml", BASE)))
    assert cfg.data["train"]["optimizer"]["args"]["lr"] == 1.0e-2
    model = torch.nn.Linear(2, 2)
    optimizer = mf.OPTIMIZERS.build({"type": "adamw", "args": {"lr": 0.1}}, params=model.parameters())
    assert isinstance(optimizer, torch.optim.AdamW) and type(optimizer).__name__ == "AdamW"
    plateau = mf.SCHEDULERS.build({"type": "reduce_lr_on_plateau", "args": {}}, optimizer=optimizer, total_steps=3)
    assert isinstance(plateau, torch.optim.lr_scheduler.ReduceLROnPlateau)
    eps_pair = mf.OPTIMIZERS.signature("adafactor").get("eps")  # a pair there: no scalar range forced on it
    assert eps_pair is not None and "tuple" in eps_pair.type_name


def test_refused_settings_leave_no_run_folder(cli, write, tmp_path):
    config = write("base.yaml", BASE)
    res = cli("train", str(config), "train.grad_clip=-1", "--run-dir", "r2")
    assert res.code == 2 and "train.grad_clip" in res.err and "run folder" not in res.err
    assert not (tmp_path / "r2").exists() and not (tmp_path / "runs").exists()
    res = cli("train", str(config), "--epochs", "-1", "--run-dir", "r3")
    assert res.code == 2 and res.err.strip().startswith("error: train.max_epochs:") and "--epochs" in res.err
    assert "scheduler" not in res.err and not (tmp_path / "r3").exists()
    # refused when building (not by a range): still nothing on disk, no "run folder:" line
    res = cli("train", str(config), "train.monitor=val_nothing", "--run-dir", "r4")
    assert res.code == 2 and "train.monitor" in res.err and "run folder" not in res.err
    assert not (tmp_path / "r4").exists()


def test_callback_and_engine_arguments_are_range_checked_too(cli, tmp_path):
    """Siblings of the settings' ranges: early stopping's patience and the ONNX opset."""
    config = str(Path(__file__).resolve().parents[1] / "configs" / "digits.yaml")
    res = cli("config", config, "train.callbacks.1.args.patience=-1")
    assert res.code == 2 and "train.callbacks.1.args.patience: expected a whole number >= 0" in res.err
    import modforge as mf

    with pytest.raises(mf.ConfigError, match="opset"):
        mf.ENGINES.build({"type": "onnx", "args": {"opset": -5}}, path="engine")
