"""``sgd`` — fine-tuning on each task in turn, nothing done against forgetting: the lower
bound every continual-learning method is compared with."""

from __future__ import annotations

from ...core.registries import register_algorithm
from .base import Algorithm


@register_algorithm("sgd")
class SGD(Algorithm):
    """Plain training on the current task's batches (the model's own loss).

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
    """


@register_algorithm("joint")
class Joint(Algorithm):
    """The upper bound: task ``t`` trains on the data of every task so far (0..t) at once,
    so nothing is ever forgotten for lack of data.

    Args:
        model: the model (wired by the runner).
        num_classes: number of classes (wired by the runner).
    """

    cumulative = True
