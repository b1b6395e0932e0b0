"""A model's named loss terms (UP-style ``cls_loss``, ``box_loss``...) are logged as their own
columns, train and validation, next to the total; resuming keeps them exact (the detection
resume tests compare ``metrics.csv`` byte for byte) and an older checkpoint resumes without them."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import modforge as mf
from modforge.data import LoaderSettings, make_loader
from modforge.train.metrics import MeanLoss
from modforge.train.trainer import Trainer


class TwoTerms(nn.Module):
    """A classifier whose loss is the sum of two named terms."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 10)

    def forward(self, batch):
        logits = self.linear(batch["input"])
        ce = F.cross_entropy(logits, batch["label"])
        reg = 0.01 * logits.pow(2).mean()
        return {**batch, "logits": logits, "ce_loss": ce, "reg_loss": reg, "loss": ce + reg}


@pytest.fixture(scope="module")
def digits():
    return mf.DATASETS.build({"type": "digits", "args": {"as_image": False}}, seed=0)


def _fit(digits, epochs=2, trainer_class=Trainer, payload=None):
    torch.manual_seed(0)
    model = TwoTerms()
    trainer = trainer_class(model, torch.optim.SGD(model.parameters(), lr=0.1), metrics={"loss": MeanLoss()},
                            max_epochs=epochs)
    generator = torch.Generator().manual_seed(0)
    loader = make_loader(digits.train, LoaderSettings(batch_size=64), train=True, generator=generator)
    val = make_loader(digits.val, LoaderSettings(batch_size=64), train=False)
    if payload is not None:
        trainer.load_state(payload, generator)
    trainer.fit(loader, val)
    return trainer


def test_each_named_term_gets_train_and_val_columns_that_add_up_to_the_loss(digits):
    trainer = _fit(digits)
    for row in trainer.history:
        for split in ("train", "val"):
            assert {f"{split}_ce_loss", f"{split}_reg_loss"} <= set(row)
            assert row[f"{split}_loss"] == pytest.approx(row[f"{split}_ce_loss"] + row[f"{split}_reg_loss"], rel=1e-5)
        assert row["train_reg_loss"] < row["train_ce_loss"]  # the terms are not swapped or copied
    assert trainer.loss_parts == ("ce_loss", "reg_loss")


def test_a_checkpoint_of_an_older_modforge_resumes_and_names_its_terms_from_the_next_epoch(digits):
    first = _fit(digits, epochs=1)
    payload = first.checkpoint_payload()  # at the epoch boundary: no epoch losses in it
    del payload["loss_parts"]  # what an older modforge wrote
    resumed = _fit(digits, epochs=2, payload=payload)
    assert resumed.loss_parts == ("ce_loss", "reg_loss")  # nothing plain to mix with: found again
    assert "train_ce_loss" in resumed.history[-1]
    assert resumed.history[0] == first.history[0]
    mid_epoch = dict(payload, epoch_losses=torch.tensor([2.3, 2.2]), epoch_sizes=[64, 64])
    model = TwoTerms()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), max_epochs=2)
    trainer.load_state(mid_epoch)
    assert trainer.loss_parts == ()  # plain losses of this epoch restored: no terms for it (found again next epoch)


class PlainStep(Trainer):
    """An overriding step that returns the loss without noting its terms."""

    def training_step(self, batch):
        return self.runnable(batch)["loss"]


def test_a_step_that_does_not_note_its_terms_logs_the_total_only(digits):
    trainer = _fit(digits, epochs=1, trainer_class=PlainStep)
    row = trainer.history[0]
    assert "train_loss" in row and not any(k.startswith("train_") and k.endswith("_loss") and k != "train_loss"
                                           for k in row)


def test_a_term_missing_from_some_batches_is_averaged_over_the_batches_that_had_it():
    metric = MeanLoss()
    one = torch.tensor(1.0)
    metric.update({"loss": one * 3, "a_loss": one, "b_loss": one * 2, "label": torch.zeros(4)})
    metric.update({"loss": one * 5, "a_loss": one * 5, "label": torch.zeros(2)})  # no b_loss in this batch
    assert metric.compute() == pytest.approx((3 * 4 + 5 * 2) / 6)
    assert metric.extra_columns() == pytest.approx({"a_loss": (4 + 10) / 6, "b_loss": 2.0})


def test_a_loss_term_can_be_monitored_and_lower_is_better(tmp_path):
    from modforge.core.config import load_config
    from modforge.core.errors import ConfigError
    from modforge.experiment.runner import Experiment
    from modforge.experiment.schema import validate_config

    def build(overrides):
        cfg = load_config("configs/digits.yaml").apply_overrides(overrides)
        validate_config(cfg)
        return Experiment.build(cfg)

    for monitor in ("val_loss_cross_entropy", "train_box_loss", "val_cls_loss"):
        exp = build([f"train.monitor={monitor}"])
        exp.check_monitor()  # the model's output decides which terms exist: checked on the first epoch's row
        assert Trainer(exp.model, torch.optim.SGD(exp.model.parameters(), lr=0.1)).direction(monitor) == "min"
    with pytest.raises(ConfigError, match="never logged"):
        build(["train.monitor=val_cls_los"]).check_monitor()
    with pytest.raises(ConfigError, match="never logged"):
        build(["train.monitor=val_cls_loss", "train.metrics=[accuracy]"]).check_monitor()
