"""A trainer that only evaluates (``modforge test``, ``export``, ``predict``) builds no torch optimizer:
the first one a process builds imports ``torch._dynamo``, seconds of every such command for nothing."""

from __future__ import annotations

import pytest
import torch

from modforge.core.config import load_config
from modforge.experiment import validate_config
from modforge.experiment.experiment import Experiment
from modforge.train.evaluation_only import EvaluationOnly

CONFIG = """
data: {type: digits, args: {as_image: false}, batch_size: 64}
model:
  backbone: {type: mlp, args: {hidden_dims: [16]}}
  head: linear
  losses: [cross_entropy]
train: {max_epochs: 1, metrics: [accuracy, loss], progress: never}
"""


def test_the_evaluator_builds_no_torch_optimizer_and_evaluates(write, monkeypatch):
    exp = Experiment.build(validate_config(load_config(write("c.yaml", CONFIG))))
    built = []
    original = torch.optim.Optimizer.__init__

    def recorded(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Optimizer, "__init__", recorded)
    trainer = exp.evaluator()
    assert not built and isinstance(trainer.optimizer, EvaluationOnly)
    _, _, test = exp.loaders()
    figures = trainer.evaluate(test, "test")
    assert 0.0 <= figures["test_accuracy"] <= 1.0 and figures["test_loss"] > 0
    assert trainer.optimizer.param_groups[0]["lr"] == 0.0
    assert len(trainer.optimizer.param_groups[0]["params"]) == len(list(exp.model.parameters()))
    with pytest.raises(RuntimeError, match="only evaluates"):
        trainer.optimizer.step()
