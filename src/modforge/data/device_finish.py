"""Training pictures that leave the loader workers as uint8 and are normalised on the training GPU.

A picture corpus augmented in loader workers hands each batch to the training process, which
pins it and copies it to the GPU. As normalised float32, a CIFAR batch of 1,024 is 12.6 MB through
the workers' shared memory, the pinning copy and the bus; as the uint8 pictures the crops and
flips made, it is 3.1 MB, and the conversion to float and the normalisation then run on the GPU
in a few launches — what timm's ``PrefetchLoader`` does, and what FFCV and DALI are built around.

The split serves uint8 only where nothing after the crops and flips needs floats in the worker:
no float transform (random erasing), no batch mixing (MixUp/CutMix), no tensor transform
(:meth:`~.images.dataset.ImageDataset.serving_uint8` says whether). The training loader then
yields batches whose input is already on the GPU and normalised, exactly the numbers the worker
would have made (:meth:`~.images.transforms.ImagePipeline.to_float` divides the same way on every
device). Chosen for every training loader of a run — a continual run's, one a task, included — by
:meth:`~modforge.experiment.experiment.Experiment.finish_device` when training on CUDA from host
memory with ``data.pin_memory`` on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from .base import copy_to

__all__ = ["FinishedOnDevice"]


class FinishedOnDevice:
    """A loader whose batches' uint8 ``input`` is copied to ``device`` and finished there by
    ``finish`` (uint8 pictures → normalised float); its ``dataset`` is the split as it serves
    samples read directly (normalised: a distillation's sizing batch, the trainer's ``set_epoch``,
    which tags the batches the workers make), and everything else a loader has — its length,
    sampler, generator — is the wrapped loader's.

    Args:
        loader: the training DataLoader (its dataset serving uint8 pictures).
        device: the training device.
        finish: uint8 pictures on ``device`` → what the model takes.
        dataset: the split itself (not serving uint8).
    """

    def __init__(self, loader: Any, device: torch.device, finish: Callable[[torch.Tensor], torch.Tensor],
                 dataset: Any):  # fmt: skip
        self.loader, self.device, self.finish, self.dataset = loader, device, finish, dataset

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:  # batch_sampler, generator, num_workers…: the loader's
        if "loader" not in self.__dict__:  # before __init__ (copy, pickle): no attribute, as on any object
            raise AttributeError(name)
        return getattr(self.__dict__["loader"], name)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            pictures = batch.get("input") if isinstance(batch, dict) else None
            if isinstance(pictures, torch.Tensor) and pictures.dtype == torch.uint8:
                batch = {**batch, "input": self.finish(copy_to(pictures, self.device))}
            yield batch
