"""``train.precision: bf16-true / 16-true``: the weights themselves stored in 16 bits (norms and
frontends in float32), trained without a grad scaler, checkpointed and resumed bit for bit; what
cannot train such weights says so (modforge.train.precision)."""

from __future__ import annotations

import pytest
import torch

import modforge as mf
from modforge.data import LoaderSettings, make_loader
from modforge.train.checkpoint import load_checkpoint
from modforge.train.ema import ExponentialMovingAverage
from modforge.train.trainer import Trainer

CNN = {"backbone": {"type": "cnn", "args": {"channels": [8, 16]}}, "neck": "global_avg_pool", "head": "linear",
       "losses": ["cross_entropy"]}  # fmt: skip


@pytest.fixture(scope="module")
def digits():
    return mf.DATASETS.build({"type": "digits", "args": {"as_image": True}}, seed=0)


def _run(digits, run_dir, epochs: int, resume=None) -> tuple[Trainer, list]:
    torch.manual_seed(0)
    model = mf.build_model(CNN, in_dim=1, num_classes=10)
    checkpoints = mf.CALLBACKS.build({"type": "checkpoint", "args": {"every_n_steps": 7}})
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), precision="bf16-true",
                      max_epochs=epochs, run_dir=run_dir, callbacks=[checkpoints], async_checkpoints=False,
                      extensions=[ExponentialMovingAverage(decay=0.9)])  # fmt: skip
    loader = make_loader(digits.train, LoaderSettings(batch_size=64), train=True, generator=torch.Generator().manual_seed(0))
    history = trainer.fit(loader, resume=resume)
    return trainer, history


def test_bf16_true_trains_16_bit_weights_with_float32_norms_and_resumes_bit_for_bit(digits, tmp_path):
    trainer, history = _run(digits, tmp_path / "whole", epochs=2)
    dtypes = {name: p.dtype for name, p in trainer.model.named_parameters()}
    assert dtypes["parts.backbone.block1.0.weight"] == dtypes["parts.head.fc.weight"] == torch.bfloat16
    assert dtypes["parts.backbone.block1.1.weight"] == torch.float32  # BatchNorm: kept in float32
    assert trainer.model.parts.backbone.block1[1].running_var.dtype == torch.float32
    assert trainer.scaler is None and history[1]["train_loss"] < history[0]["train_loss"] < 2.0
    average = trainer.extension("ema").average.average
    assert average["parts.head.fc.weight"].dtype == torch.float32  # the weight average of 16-bit weights
    middle = next(p for p in sorted((tmp_path / "whole" / "checkpoints").glob("epoch*-step*.pt"))
                  if load_checkpoint(p)["global_step"] % 20)  # mid-epoch (20 steps an epoch)  # fmt: skip
    assert load_checkpoint(middle)["model"]["parts.head.fc.weight"].dtype == torch.bfloat16
    resumed, _ = _run(digits, tmp_path / "resumed", epochs=2, resume=load_checkpoint(middle))
    ours, theirs = resumed.model.state_dict(), trainer.model.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert all(torch.equal(resumed.extension("ema").average.average[k], average[k]) for k in average)


def test_what_cannot_train_16_bit_weights_is_refused_naming_both_keys(cli, write):
    cfg = write("q.yaml", """
        data: {type: digits, args: {as_image: true}}
        model: {backbone: {type: cnn, args: {channels: [4]}}, neck: global_avg_pool, head: linear,
                losses: [cross_entropy]}
        train: {max_epochs: 1, precision: 16-true, qat: {parts: [backbone]}}
    """)
    res = cli("train", str(cfg))
    assert res.code == 2
    assert "train.qat cannot train with precision '16-true' (weights stored in 16 bits)" in res.err
    assert "use precision '16' (mixed)" in res.err
    res = cli("train", str(cfg), "train.precision=17-true")
    assert res.code == 2 and "train.precision" in res.err and "bf16-true" in res.err
