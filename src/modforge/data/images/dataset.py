"""A split of labelled pictures as a dataset of dict batches (``input``, ``label``, ``index``).

The pictures come from a *source*: :class:`TensorPictures` holds a corpus in memory as one
uint8 tensor (MNIST, CIFAR: a few hundred MB at most), :class:`FilePictures` lists picture
files and decodes each when it is read — inside the DataLoader's workers, so memory grows
with the batches in flight, not with the dataset (Tiny-ImageNet, a folder of pictures).

Each split carries two pipelines (:class:`~.transforms.ImagePipeline`): the training one
(random transforms) and the evaluation one, chosen by the split's ``train`` flag, so k-fold
can re-split a pool into training and evaluation parts. A sample's randomness is seeded by
(seed, epoch, the sample's id); the epoch comes with the batch's indices
(:class:`EpochBatch`, tagged by the loader in the training process) so persistent workers,
which never see :meth:`ImageDataset.set_epoch`, still draw the right epoch's augmentation.
Without any per-sample transform an in-memory batch is converted in one tensor operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from torch.utils.data import Dataset

from .mixing import BatchMixing
from .transforms import ImagePipeline, SampleRandomness, sample_seed

__all__ = ["EpochBatch", "FilePictures", "ImageDataset", "TensorPictures"]

MAX_PICTURE_PIXELS = 2**26
"""Largest picture a folder dataset decodes (e.g. 8,192 × 8,192); bigger files are refused as
possible decompression bombs, naming the file."""


class EpochBatch(list):
    """A batch's sample positions, tagged with the epoch they are drawn for."""

    def __init__(self, positions: Sequence[int], epoch: int):
        super().__init__(positions)
        self.epoch = int(epoch)

    def __reduce__(self):  # sent to worker processes: keep the tag
        return (EpochBatch, (list(self), self.epoch))


class TensorPictures:
    """Pictures held as one uint8 ``[N, C, H, W]`` tensor."""

    def __init__(self, pictures: torch.Tensor):
        if pictures.dtype != torch.uint8 or pictures.ndim != 4:
            raise ValueError(f"expected uint8 pictures [N, C, H, W], got {pictures.dtype} {list(pictures.shape)}")
        self.pictures = pictures

    def __len__(self) -> int:
        return len(self.pictures)

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.pictures.shape[1:])  # type: ignore[return-value]

    def read(self, position: int) -> torch.Tensor:
        return self.pictures[position]

    def read_many(self, positions: torch.Tensor) -> torch.Tensor:
        return self.pictures[positions]

    def take(self, positions: torch.Tensor) -> TensorPictures:
        return TensorPictures(self.pictures[positions])

    @staticmethod
    def join(parts: Sequence[TensorPictures]) -> TensorPictures:
        return TensorPictures(torch.cat([p.pictures for p in parts]))


class FilePictures:
    """Picture files decoded when read (Pillow, converted to ``mode`` like torchvision's loader).

    Args:
        files: the pictures' paths.
        mode: 'RGB' (3 channels) or 'L' (grey, 1 channel).
    """

    def __init__(self, files: Sequence[Path], mode: Literal["RGB", "L"] = "RGB"):
        self.files, self.mode = [Path(f) for f in files], mode

    def __len__(self) -> int:
        return len(self.files)

    def read(self, position: int) -> torch.Tensor:
        from ..pictures import decode_picture

        array = decode_picture(self.files[position], mode=self.mode, max_pixels=MAX_PICTURE_PIXELS)
        if array.ndim == 2:
            array = array[:, :, None]
        return torch.from_numpy(array).permute(2, 0, 1).contiguous()

    def take(self, positions: torch.Tensor) -> FilePictures:
        return FilePictures([self.files[int(i)] for i in positions], self.mode)

    @staticmethod
    def join(parts: Sequence[FilePictures]) -> FilePictures:
        return FilePictures([f for p in parts for f in p.files], parts[0].mode)


Source = TensorPictures | FilePictures


class ImageDataset(Dataset):
    """Labelled pictures of one split (see the module doc).

    Args:
        source: the pictures.
        labels: ``[N]`` class indices.
        train_pipeline, eval_pipeline: what a picture goes through in training / evaluation.
        train: whether this split trains (random pipeline, mixing) or evaluates.
        seed: seeds every sample's randomness with the epoch and the sample's id.
        mixing: MixUp/CutMix of training batches (None: none).
        ids: each sample's id (default ``0..N-1``): kept through subsets and folds.
    """

    def __init__(self, source: Source, labels: torch.Tensor, *, train_pipeline: ImagePipeline,
                 eval_pipeline: ImagePipeline, train: bool, seed: int = 0, mixing: BatchMixing | None = None,
                 ids: torch.Tensor | None = None):  # fmt: skip
        if len(source) != len(labels):
            raise ValueError(f"{len(source)} pictures but {len(labels)} labels")
        self.source, self.labels = source, labels.to(torch.long)
        self.train_pipeline, self.eval_pipeline = train_pipeline, eval_pipeline
        self.train, self.seed, self.mixing = train, int(seed), mixing
        self.ids = ids if ids is not None else torch.arange(len(labels))
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def pipeline(self) -> ImagePipeline:
        return self.train_pipeline if self.train else self.eval_pipeline

    def set_epoch(self, epoch: int) -> None:
        """Seed the next epoch's augmentation (called by the trainer; batches tagged with
        :class:`EpochBatch` carry their own epoch)."""
        self.epoch = int(epoch)

    def _like(self, source: Source, labels: torch.Tensor, ids: torch.Tensor, train: bool) -> ImageDataset:
        part = ImageDataset(source, labels, train_pipeline=self.train_pipeline, eval_pipeline=self.eval_pipeline,
                            train=train, seed=self.seed, mixing=self.mixing, ids=ids)  # fmt: skip
        return part

    def subset(self, positions: Sequence[int] | torch.Tensor, *, train: bool | None = None) -> ImageDataset:
        """The samples at ``positions`` (keeping their ids), as a training or evaluation split
        (``train``; None: as this one)."""
        idx = torch.as_tensor(positions, dtype=torch.long)
        return self._like(self.source.take(idx), self.labels[idx], self.ids[idx], self.train if train is None else train)

    @staticmethod
    def concat(parts: Sequence[ImageDataset]) -> ImageDataset:
        """Every part's samples in order, with the first part's pipelines and flag."""
        first = parts[0]
        source = type(first.source).join([p.source for p in parts])  # type: ignore[arg-type]
        return first._like(source, torch.cat([p.labels for p in parts]), torch.cat([p.ids for p in parts]), first.train)

    def picture(self, position: int, epoch: int | None = None) -> torch.Tensor:
        """Sample ``position`` after its pipeline (float ``[C, H, W]``), as epoch ``epoch`` draws it."""
        pipeline = self.pipeline
        with SampleRandomness.kept():
            SampleRandomness.seed(sample_seed(self.seed, self.epoch if epoch is None else epoch, int(self.ids[position])))
            return pipeline(self.source.read(position))

    def __getitem__(self, position: int) -> dict[str, torch.Tensor]:
        return {"input": self.picture(position), "label": self.labels[position], "index": self.ids[position]}

    def __getitems__(self, positions: Sequence[int]) -> dict[str, torch.Tensor]:
        epoch = getattr(positions, "epoch", self.epoch)
        idx = torch.as_tensor(list(positions), dtype=torch.long)
        pipeline = self.pipeline
        if not pipeline.random and isinstance(self.source, TensorPictures):
            images = pipeline.to_float(self.source.read_many(idx))
        else:
            images = torch.stack([self.picture(int(p), epoch) for p in idx])
        labels = self.labels[idx]
        if self.train and self.mixing is not None:
            with SampleRandomness.kept():
                SampleRandomness.seed(sample_seed(self.seed, epoch, int(self.ids[idx[0]]), stream=1))
                images, labels = self.mixing(images, labels)
        return {"input": images, "label": labels, "index": self.ids[idx]}
