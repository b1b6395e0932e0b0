"""What an algorithm needs for its own passes over data, outside the trainer's steps (filling a
memory at a task end, fitting a correction, retraining on the memory): the batch size the task
trained with, the loader's batches on the trainer's device, tensors cut into forward-sized
chunks, and the model's mode (training, BatchNorm statistics) set for the pass and put back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

__all__ = [
    "batchnorm_statistics_frozen",
    "in_chunks",
    "loader_batch_size",
    "prepared",
    "stepped_batch_size",
    "training_mode",
]


def stepped_batch_size(algorithm: Any, loader: Any) -> int:
    """The training batch size over every process: the largest batch ``algorithm`` stepped on
    (its ``train_batch``), else the loader's (× the processes)."""
    if algorithm.train_batch:
        return algorithm.train_batch
    size = getattr(loader, "batch_size", None) or len(next(iter(loader))["label"])
    return int(size) * algorithm.processes.world_size


def loader_batch_size(trainer: Any, loader: Any, default: int = 32) -> int:
    """Mammoth's ``batch_size``: the trainer's training loader's, else ``loader``'s, else ``default``."""
    for source in (getattr(trainer, "train_loader", None), loader):
        size = getattr(source, "batch_size", None)
        if size:
            return int(size)
    return default


def prepared(trainer: Any, loader: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The loader's batches, on the trainer's device (its ``prepare_batch``, when it has one)."""
    prepare = getattr(trainer, "prepare_batch", None)
    for batch in loader:
        yield prepare(batch) if prepare is not None else batch


def in_chunks(data: dict[str, torch.Tensor], size: int) -> list[dict[str, torch.Tensor]]:
    """``data``'s rows as batches of ``size`` (the last one shorter), every key cut alike: what
    ``trainer.collect`` forwards when a memory's features or logits are computed."""
    count = len(next(iter(data.values())))
    return [{key: value[start : start + size] for key, value in data.items()} for start in range(0, count, size)]


@contextlib.contextmanager
def training_mode(model: nn.Module, mode: bool = True) -> Iterator[nn.Module]:
    """While inside, ``model`` is in training mode (``mode``: False for eval); its mode before
    is put back on the way out."""
    was_training = model.training
    model.train(mode)
    try:
        yield model
    finally:
        model.train(was_training)


@contextlib.contextmanager
def batchnorm_statistics_frozen(model: nn.Module, frozen: bool = True) -> Iterator[None]:
    """While inside (when ``frozen``), BatchNorm layers in training mode normalise with the
    batch's statistics without updating their running ones (Mammoth's ``bn_track_stats``)."""
    layers = (
        [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
        if frozen else []
    )  # fmt: skip
    for layer in layers:
        layer.track_running_stats = False
    try:
        yield
    finally:
        for layer in layers:
            layer.track_running_stats = True
