"""Datasets as modforge sees them: items and batches are dicts (``input``, ``label``, ``index``).

:class:`ArrayDataset` keeps a split in memory as tensors and serves whole batches at
once (``__getitems__``, which ``DataLoader`` uses when present): one indexing operation
per batch instead of one Python call per sample, so the data path costs next to nothing.

A dataset entry in the registry returns :class:`DataSplits`: the splits plus what the
model builder needs to know about the input (size, layout, one sample's shape, classes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from ..core.layouts import Layout

__all__ = ["ArrayDataset", "DataSplits", "collate", "copy_to"]


def copy_to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device`` without making the host wait for the device: a small host tensor
    (a batch's positions, its draws) bound for a CUDA device goes through page-locked memory
    (torch's caching host allocator), so the copy is queued behind the running step instead of
    waiting for it, as a copy from pageable memory does."""
    if tensor.device == device:
        return tensor
    if device.type == "cuda" and tensor.device.type == "cpu":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


class ArrayDataset(Dataset):
    """A split held as tensors: ``inputs[i]``, ``labels[i]`` and the sample's index.

    Args:
        inputs: ``[N, ...]`` tensor.
        labels: ``[N]`` integer tensor.
        ids: optional ``[N]`` tensor of original indices (default ``0..N-1``), so a
            sample keeps its identity across splits and folds.
    """

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor | None = None):
        if len(inputs) != len(labels):
            raise ValueError(f"inputs ({len(inputs)}) and labels ({len(labels)}) differ in length")
        self.inputs, self.labels = inputs, labels
        self.ids = ids if ids is not None else torch.arange(len(labels))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input": self.inputs[i], "label": self.labels[i], "index": self.ids[i]}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        idx = copy_to(torch.as_tensor(indices, dtype=torch.long), self.inputs.device)
        return {"input": self.inputs[idx], "label": self.labels[idx], "index": self.ids[idx]}

    def to_device(self, device: torch.device | str) -> ArrayDataset:
        """The same samples held on ``device`` (``data.device``: batches are then cut there)."""
        return ArrayDataset(self.inputs.to(device), self.labels.to(device), self.ids.to(device))

    def subset(self, positions: Sequence[int] | torch.Tensor, *, train: bool | None = None) -> ArrayDataset:
        """The samples at ``positions`` (keeping their ids). ``train`` is accepted for the
        common dataset interface (audio splits crop and augment only in training); arrays are
        served the same either way."""
        idx = torch.as_tensor(positions, dtype=torch.long)
        return ArrayDataset(self.inputs[idx], self.labels[idx], self.ids[idx])

    @staticmethod
    def concat(parts: Sequence[ArrayDataset]) -> ArrayDataset:
        """One dataset holding every part's samples, in order."""
        return ArrayDataset(
            torch.cat([p.inputs for p in parts]),
            torch.cat([p.labels for p in parts]),
            torch.cat([p.ids for p in parts]),
        )


def collate(items: Any) -> Any:
    """Batches from ``__getitems__`` are already dicts; anything else goes to torch's collate."""
    if isinstance(items, dict):
        return items
    from torch.utils.data import default_collate

    return default_collate(items)


@dataclasses.dataclass
class DataSplits:
    """What a dataset entry returns.

    Attributes:
        train, val, test: the splits (``val``/``test`` may be None).
        num_classes: number of classes.
        in_dim: the model's input size (features, or channels of an image).
        layout: the input layout.
        input_shape: one sample's shape, e.g. ``(1, 8, 8)``.
        class_names: readable class names, in label order.
        normalisation: what was done to raw values before they became inputs (recorded in
            exported artifacts), e.g. ``{"divide_by": 16.0}``.
        image: how a picture file becomes one input sample, for ``modforge predict``:
            ``{"height", "width", "channels", "ink": "dark"|"light", "scale"}`` (None: inputs
            are not pictures).
        sample_rate: audio sample rate in Hz (None: not audio); handed to frontends.
        task: what the labels mean: 'classification' or 'spoofing' (label 1 = bona fide).
    """

    train: Dataset
    val: Dataset | None
    test: Dataset | None
    num_classes: int
    in_dim: int
    layout: Layout
    input_shape: tuple[int, ...]
    class_names: list[str] = dataclasses.field(default_factory=list)
    normalisation: dict = dataclasses.field(default_factory=dict)
    image: dict | None = None
    sample_rate: int | None = None
    task: str = "classification"

    def __post_init__(self) -> None:
        self.layout = Layout(self.layout)
        if not self.class_names:
            self.class_names = [str(i) for i in range(self.num_classes)]
