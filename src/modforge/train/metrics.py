"""Evaluation metrics, accumulated on the device during a pass and read once at its end.

Each metric is registered, declares whether higher is better (so checkpointing and early
stopping need no ``mode`` to be told), and keeps running sums as tensors: ``update`` never
synchronises with the host; ``compute`` does, once per evaluation.

``accuracy``, ``top_k_accuracy``, ``macro_f1`` and ``confusion_matrix`` read the logits and
labels; ``loss`` reads the batch's loss.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import torch

from ..core.errors import ModforgeError
from ..core.registries import register_metric
from ..model.spec import is_loss_key
from .distributed import all_gather_objects, all_reduce_sum


def is_loss_term(key: str) -> bool:
    """A loss key (:func:`~modforge.model.spec.is_loss_key`) other than the total ``loss``: a
    named term such as ``cls_loss`` or a config's ``loss_<name>``."""
    return key != "loss" and is_loss_key(key)

__all__ = ["Metric"]


def batch_size_of(batch: dict[str, Any]) -> int:
    """How many samples a batch holds, for size-weighted means: its labels, else its
    per-image detection targets, else 1."""
    if "label" in batch:
        return int(batch["label"].shape[0]) if batch["label"].ndim else 1
    if "targets" in batch:
        return len(batch["targets"])
    return 1


class Metric(abc.ABC):
    """Base: ``reset()``, ``update(batch_out)``, ``compute()``.

    Attributes:
        higher_is_better: direction of improvement.
        scalar: False for metrics that are not one number (a confusion matrix); those go
            to ``summary.json`` but not to ``metrics.csv`` or monitoring.
        logs: for a metric whose ``compute()`` returns a mapping (several figures from one
            evaluation, like COCO's AP family): the names it logs as ``val_<name>`` columns
            (each monitorable, all with this metric's direction); its other entries go to
            ``summary.json``. Empty: the metric logs one value under its own name.
    """

    higher_is_better: ClassVar[bool] = True
    scalar: ClassVar[bool] = True
    logs: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget everything accumulated."""

    @abc.abstractmethod
    def update(self, out: dict[str, Any]) -> None:
        """Add one batch (the model's output dict, with ``label``)."""

    @abc.abstractmethod
    def compute(self) -> Any:
        """The value over everything since :meth:`reset`."""

    def extra_columns(self) -> dict[str, float]:
        """Further per-epoch columns this metric logs beside its own value, named without the
        split prefix (the ``loss`` metric: each named loss term, ``val_cls_loss``...). Default: none."""
        return {}

    def sync(self, what: str = "a metric") -> None:
        """Combine what every process accumulated (called in multi-process evaluation,
        before :meth:`compute`), so the value is the one of all the data — sums and counts
        are added, never averages averaged. Built-in metrics implement it; a metric of
        your own that is used with several processes must too."""
        raise ModforgeError(
            f"{what} ({type(self).__name__}) cannot be combined across processes: give it a sync() method that "
            "adds up what every process accumulated (see modforge.train.distributed.all_reduce_sum)"
        )


class _Counting(Metric):
    def reset(self) -> None:
        self.hits: torch.Tensor | int = 0
        self.count = 0

    def compute(self) -> float:
        return int(self.hits) / self.count if self.count else float("nan")

    def sync(self, what: str = "a metric") -> None:
        both = all_reduce_sum(torch.stack([torch.as_tensor(self.hits).double(), torch.tensor(float(self.count))]), what)
        self.hits, self.count = int(both[0]), int(both[1])


@register_metric("accuracy")
class Accuracy(_Counting):
    """Share of samples whose highest logit is the true class."""

    def __init__(self):
        self.reset()

    def update(self, out: dict[str, Any]) -> None:
        label = out["label"]
        self.hits = self.hits + (out["logits"].argmax(dim=-1) == label).sum()
        self.count += label.numel()


@register_metric("top_k_accuracy")
class TopKAccuracy(_Counting):
    """Share of samples whose true class is among the ``k`` highest logits.

    Args:
        k: how many of the highest logits count.
    """

    def __init__(self, k: int = 5):
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        self.k = k
        self.reset()

    def update(self, out: dict[str, Any]) -> None:
        logits, label = out["logits"], out["label"]
        top = logits.topk(min(self.k, logits.shape[-1]), dim=-1).indices
        self.hits = self.hits + (top == label.unsqueeze(-1)).any(dim=-1).sum()
        self.count += label.numel()


class _Confusion(Metric):
    """Accumulates a ``[num_classes, num_classes]`` confusion matrix (rows: true class)."""

    def __init__(self, num_classes: int):
        if num_classes < 1:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        self.num_classes = num_classes
        self.reset()

    def reset(self) -> None:
        self.matrix: torch.Tensor | None = None

    def sync(self, what: str = "a metric") -> None:
        mine = self.matrix if self.matrix is not None else torch.zeros(self.num_classes, self.num_classes, dtype=torch.long)
        self.matrix = all_reduce_sum(mine.cpu(), what)

    def update(self, out: dict[str, Any]) -> None:
        c = self.num_classes
        pred, label = out["logits"].argmax(dim=-1), out["label"]
        counts = torch.bincount(label.reshape(-1) * c + pred.reshape(-1), minlength=c * c).reshape(c, c)
        self.matrix = counts if self.matrix is None else self.matrix + counts


@register_metric("macro_f1")
class MacroF1(_Confusion):
    """F1 score averaged over classes with equal weight (classes never seen nor predicted
    are left out of the average).

    Args:
        num_classes: number of classes (wired by the builder).
    """

    def compute(self) -> float:
        if self.matrix is None:
            return float("nan")
        m = self.matrix.double()
        tp = m.diag()
        predicted, actual = m.sum(dim=0), m.sum(dim=1)
        present = (predicted + actual) > 0
        f1 = torch.where(present, 2 * tp / (predicted + actual).clamp(min=1), torch.zeros_like(tp))
        return float(f1[present].mean()) if present.any() else float("nan")


@register_metric("confusion_matrix")
class ConfusionMatrix(_Confusion):
    """Counts per (true class, predicted class); reported in ``summary.json``.

    Args:
        num_classes: number of classes (wired by the builder).
    """

    scalar = False

    def compute(self) -> list[list[int]]:
        if self.matrix is None:
            return [[0] * self.num_classes for _ in range(self.num_classes)]
        return self.matrix.tolist()


@register_metric("loss")
class MeanLoss(Metric):
    """The batch losses averaged over samples; and each named loss term of the model
    (``cls_loss``, ``box_loss``... — scalar ``*_loss`` outputs) as its own column."""

    higher_is_better = False

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.total: torch.Tensor | float = 0.0
        self.count = 0
        self.terms: dict[str, torch.Tensor | float] = {}
        self.term_counts: dict[str, int] = {}  # a term some batches lack is averaged over those that had it

    def update(self, out: dict[str, Any]) -> None:
        if "loss" not in out:
            return
        n = batch_size_of(out)
        self.total = self.total + out["loss"].detach().float() * n
        self.count += n
        for key, value in out.items():
            if is_loss_term(key) and isinstance(value, torch.Tensor) and value.ndim == 0:
                self.terms[key] = self.terms.get(key, 0.0) + value.detach().float() * n
                self.term_counts[key] = self.term_counts.get(key, 0) + n

    def compute(self) -> float:
        return float(self.total) / self.count if self.count else float("nan")

    def extra_columns(self) -> dict[str, float]:
        if not self.count or len(self.terms) < 2:  # a single term is the total: no column repeating it
            return {}
        return {key: float(total) / self.term_counts[key] for key, total in self.terms.items()}

    def sync(self, what: str = "a metric") -> None:
        # the names every process saw (a process whose shard was empty saw none): the same vector everywhere
        keys = sorted(set().union(*all_gather_objects(sorted(self.terms), what)))
        values = [torch.as_tensor(self.total).double().cpu(), torch.tensor(float(self.count))]
        values += [torch.as_tensor(self.terms.get(k, 0.0)).double().cpu() for k in keys]
        values += [torch.tensor(float(self.term_counts.get(k, 0))) for k in keys]
        both = all_reduce_sum(torch.stack(values), what)
        self.total, self.count = float(both[0]), int(both[1])
        sums, counts = both[2 : 2 + len(keys)].tolist(), both[2 + len(keys) :].tolist()
        self.terms = {k: float(v) for k, v in zip(keys, sums, strict=True)}
        self.term_counts = {k: int(c) for k, c in zip(keys, counts, strict=True)}
