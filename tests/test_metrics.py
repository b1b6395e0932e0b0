"""Metrics against scikit-learn on random predictions, accumulated over several batches."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, top_k_accuracy_score

import modforge as mf


def batches(seed: int = 0, n: int = 5, size: int = 17, classes: int = 6):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n):
        yield {"logits": torch.randn(size, classes, generator=gen), "label": torch.randint(0, classes, (size,), generator=gen),
               "loss": torch.rand((), generator=gen)}


def run(metric, seed=0):
    metric.reset()
    for b in batches(seed):
        metric.update(b)
    return metric.compute()


def truth(seed=0):
    bs = list(batches(seed))
    logits = torch.cat([b["logits"] for b in bs]).numpy()
    labels = torch.cat([b["label"] for b in bs]).numpy()
    return logits, labels, bs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_against_sklearn(seed):
    logits, labels, bs = truth(seed)
    pred = logits.argmax(1)
    assert run(mf.METRICS.build("accuracy"), seed) == pytest.approx(accuracy_score(labels, pred), abs=1e-12)
    assert run(mf.METRICS.build({"type": "top_k_accuracy", "args": {"k": 3}}), seed) == pytest.approx(
        top_k_accuracy_score(labels, logits, k=3, labels=list(range(6))), abs=1e-12)
    present = sorted(set(labels) | set(pred))
    assert run(mf.METRICS.build("macro_f1", num_classes=6), seed) == pytest.approx(
        f1_score(labels, pred, average="macro", labels=present), abs=1e-12)
    assert run(mf.METRICS.build("confusion_matrix", num_classes=6), seed) == confusion_matrix(labels, pred, labels=list(range(6))).tolist()
    expected_loss = sum(float(b["loss"]) * len(b["label"]) for b in bs) / len(labels)
    assert run(mf.METRICS.build("loss"), seed) == pytest.approx(expected_loss, rel=1e-6)


def test_directions_and_empty_passes():
    assert mf.METRICS.get("accuracy").higher_is_better and not mf.METRICS.get("loss").higher_is_better
    assert math.isnan(mf.METRICS.build("accuracy").compute())
    assert not mf.METRICS.get("confusion_matrix").scalar
    with pytest.raises(mf.BuildError, match="k must be at least 1"):
        mf.METRICS.build({"type": "top_k_accuracy", "args": {"k": 0}})
    perfect = mf.METRICS.build("macro_f1", num_classes=3)
    perfect.update({"logits": torch.eye(3), "label": torch.arange(3)})
    assert perfect.compute() == 1.0
