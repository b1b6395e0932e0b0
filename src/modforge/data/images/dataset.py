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
An in-memory batch (:class:`TensorPictures`) is augmented as a whole
(:meth:`~.transforms.ImagePipeline.batch`: the same pictures as one at a time, in a few tensor
operations) unless its list holds a transform without a batched form; :meth:`ImageDataset.to_device`
keeps a split's pictures on the accelerator, where its batches are then made (``data.device``).

A split may also carry two *fixed* transforms (the same for every sample and epoch, no randomness):
``picture_transform`` on the uint8 pictures before the pipeline and ``tensor_transform`` on the
float tensors after it — what a continual benchmark's task does to its inputs (a rotation of the
pictures, a permutation or flattening of the pixels; :mod:`modforge.continual.benchmarks`). Both
take a batch (``[B, ...]``) and must be picklable (they travel to the loader's workers).
:meth:`ImageDataset.relabelled` renumbers the classes; :meth:`ImageDataset.concat` of parts whose
pipelines or fixed transforms differ (the tasks of a domain-incremental sequence) is a
:class:`JoinedImageDataset`, which serves each sample as its own part does.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import torch
from torch.utils.data import Dataset

from ..base import copy_to
from .mixing import BatchMixing
from .transforms import ImagePipeline, SampleRandomness, sample_seed, sample_seeds

__all__ = ["EpochBatch", "FilePictures", "ImageDataset", "JoinedImageDataset", "TensorPictures"]

MAX_PICTURE_PIXELS = 2**26
"""Default pixel budget of a picture a folder dataset decodes (e.g. 8,192 × 8,192: 192 MiB as RGB); a file
whose header declares more is refused before decoding, as a possible decompression bomb, naming the file.
``image_folder`` and ``image_csv`` take their own budget (``max_pixels``)."""


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
        return self.pictures.index_select(0, copy_to(positions, self.pictures.device))  # [] is ~50× slower on uint8

    def to(self, device: torch.device | str) -> TensorPictures:
        """The same pictures held on ``device``."""
        return TensorPictures(self.pictures.to(device))

    def take(self, positions: torch.Tensor) -> TensorPictures:
        return TensorPictures(self.pictures[positions])

    @staticmethod
    def join(parts: Sequence[TensorPictures]) -> TensorPictures:
        return TensorPictures(torch.cat([p.pictures for p in parts]))


@functools.cache
def _jpeg_decoder():
    """torchvision's JPEG decoder to RGB, or None where this torchvision has none (its image
    decoding is deprecated since 0.29 in favour of TorchCodec: when it goes, Pillow decodes)."""
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError:
        return None
    return functools.partial(decode_jpeg, mode=ImageReadMode.RGB)


class FilePictures:
    """Picture files decoded when read, to the values torchvision's loader gives (Pillow's
    ``convert(mode)``). A baseline or progressive JPEG in RGB or grey read as RGB is decoded by
    torchvision's libjpeg-turbo decoder straight into a tensor — the same decoder and settings
    Pillow uses, so the same pixels (tested), in about 40 % of the time; every other case
    goes through Pillow. Either way the header is checked first (formats, pixel limit).

    Args:
        files: the pictures' paths.
        mode: 'RGB' (3 channels) or 'L' (grey, 1 channel).
        max_pixels: the pixel budget: a picture whose header declares more is refused before decoding.
    """

    def __init__(self, files: Sequence[Path], mode: Literal["RGB", "L"] = "RGB", max_pixels: int = MAX_PICTURE_PIXELS):
        self.files, self.mode, self.max_pixels = [Path(f) for f in files], mode, int(max_pixels)

    def __len__(self) -> int:
        return len(self.files)

    def read(self, position: int) -> torch.Tensor:
        from ..pictures import PictureError, decode_picture, open_picture, open_picture_file

        path = self.files[position]
        if self.mode == "RGB":
            with open_picture(path, max_pixels=self.max_pixels) as header:
                fast = header.format == "JPEG" and header.mode in ("RGB", "L")
            decoder = _jpeg_decoder() if fast else None
            if decoder is not None:
                with open_picture_file(path) as handle:  # a regular file still: never a FIFO's blocking read
                    data = torch.frombuffer(bytearray(handle.read()), dtype=torch.uint8)
                try:
                    return decoder(data)
                except RuntimeError as exc:  # a damaged file: one line naming it, as Pillow's path says
                    raise PictureError(f"image file {path} is not a readable image ({str(exc)[:200]})") from None
        array = decode_picture(path, mode=self.mode, max_pixels=self.max_pixels)
        if array.ndim == 2:
            array = array[:, :, None]
        return torch.from_numpy(array).permute(2, 0, 1).contiguous()

    def take(self, positions: torch.Tensor) -> FilePictures:
        return FilePictures([self.files[int(i)] for i in positions], self.mode, self.max_pixels)

    @staticmethod
    def join(parts: Sequence[FilePictures]) -> FilePictures:
        return FilePictures([f for p in parts for f in p.files], parts[0].mode, max(p.max_pixels for p in parts))


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
        picture_transform: a fixed transform of the uint8 pictures ``[B, C, H, W]`` before the
            pipeline (None: none), e.g. a task's rotation.
        tensor_transform: a fixed transform of the float tensors ``[B, ...]`` after the pipeline
            (None: none), e.g. a task's pixel permutation, or flattening for an MLP.
    """

    def __init__(self, source: Source, labels: torch.Tensor, *, train_pipeline: ImagePipeline,
                 eval_pipeline: ImagePipeline, train: bool, seed: int = 0, mixing: BatchMixing | None = None,
                 ids: torch.Tensor | None = None, picture_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 tensor_transform: Callable[[torch.Tensor], torch.Tensor] | None = None):  # fmt: skip
        if len(source) != len(labels):
            raise ValueError(f"{len(source)} pictures but {len(labels)} labels")
        self.source, self.labels = source, labels.to(torch.long)
        self.train_pipeline, self.eval_pipeline = train_pipeline, eval_pipeline
        self.train, self.seed, self.mixing = train, int(seed), mixing
        self.ids = ids if ids is not None else torch.arange(len(labels))
        self.picture_transform, self.tensor_transform = picture_transform, tensor_transform
        self.epoch = 0
        self._epoch_pictures: tuple[tuple, torch.Tensor] | None = None  # on a device: _augmented_epoch
        self._draw_block: tuple[int, int, torch.device, torch.Tensor] | None = None  # its draws, 8 epochs at once
        self._uint8_out = False  # serving_uint8: the pictures leave as uint8, normalised where they train
        self._host_table: tuple[tuple[int, int], torch.Tensor] | None = None  # on the host: _host_draws

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def pipeline(self) -> ImagePipeline:
        return self.train_pipeline if self.train else self.eval_pipeline

    def set_epoch(self, epoch: int) -> None:
        """Seed the next epoch's augmentation (called by the trainer; batches tagged with
        :class:`EpochBatch` carry their own epoch)."""
        self.epoch = int(epoch)

    def _like(self, source: Source, labels: torch.Tensor, ids: torch.Tensor, train: bool, **changes) -> ImageDataset:
        settings = {"train_pipeline": self.train_pipeline, "eval_pipeline": self.eval_pipeline, "seed": self.seed,
                    "mixing": self.mixing, "picture_transform": self.picture_transform,
                    "tensor_transform": self.tensor_transform, **changes}  # fmt: skip
        return ImageDataset(source, labels, train=train, ids=ids, **settings)

    def relabelled(self, mapping: torch.Tensor) -> ImageDataset:
        """The same samples with each label ``y`` renumbered to ``mapping[y]``."""
        return self._like(self.source, torch.as_tensor(mapping, dtype=torch.long)[self.labels], self.ids, self.train)

    def with_fixed_transforms(self, *, picture: Callable[[torch.Tensor], torch.Tensor] | None = None,
                              tensor: Callable[[torch.Tensor], torch.Tensor] | None = None) -> ImageDataset:
        """The same samples with these fixed transforms (replacing this split's; None: none)."""
        return self._like(self.source, self.labels, self.ids, self.train, picture_transform=picture,
                          tensor_transform=tensor)  # fmt: skip

    def _same_serving(self, other: ImageDataset) -> bool:
        """Whether ``other``'s samples go through exactly what this split's go through."""
        return (type(self.source) is type(other.source) and self.train_pipeline is other.train_pipeline
                and self.eval_pipeline is other.eval_pipeline and self.mixing is other.mixing
                and self.seed == other.seed and self.picture_transform is other.picture_transform
                and self.tensor_transform is other.tensor_transform)  # fmt: skip

    def subset(self, positions: Sequence[int] | torch.Tensor, *, train: bool | None = None) -> ImageDataset:
        """The samples at ``positions`` (keeping their ids), as a training or evaluation split
        (``train``; None: as this one)."""
        idx = torch.as_tensor(positions, dtype=torch.long)
        return self._like(self.source.take(idx), self.labels[idx], self.ids[idx], self.train if train is None else train)

    @staticmethod
    def concat(parts: Sequence[ImageDataset]) -> ImageDataset | JoinedImageDataset:
        """Every part's samples in order. Parts served alike (the same pipelines, mixing and fixed
        transforms: subsets of one split) become one split with the first part's flag; parts served
        differently (the tasks of a domain-incremental sequence) a :class:`JoinedImageDataset`."""
        first = parts[0]
        if not all(first._same_serving(p) for p in parts[1:]):
            return JoinedImageDataset(parts)
        source = type(first.source).join([p.source for p in parts])  # type: ignore[arg-type]
        return first._like(source, torch.cat([p.labels for p in parts]), torch.cat([p.ids for p in parts]), first.train)

    def picture(self, position: int, epoch: int | None = None, *, to_float: bool = True) -> torch.Tensor:
        """Sample ``position`` after its pipeline and fixed transforms (float ``[C, H, W]``, or what
        ``tensor_transform`` makes of it), as epoch ``epoch`` draws it; ``to_float=False``: after
        the transforms on the uint8 picture only (no float transform follows: :meth:`serving_uint8`)."""
        pipeline = self.pipeline
        raw = self.source.read(position)
        if self.picture_transform is not None:
            raw = self.picture_transform(raw.unsqueeze(0))[0]
        with SampleRandomness.kept():
            SampleRandomness.seed(sample_seed(self.seed, self.epoch if epoch is None else epoch, int(self.ids[position])))
            image = pipeline(raw) if to_float else pipeline.geometry(raw)
        return image if self.tensor_transform is None else self.tensor_transform(image.unsqueeze(0))[0]

    def __getitem__(self, position: int) -> dict[str, torch.Tensor]:
        return {"input": self.picture(position), "label": self.labels[position], "index": self.ids[position]}

    def images(self, positions: torch.Tensor, epoch: int) -> torch.Tensor:
        """The samples at ``positions`` as the model receives them (before batch mixing): an
        in-memory batch as a whole where its pipeline allows (the same pictures), else one
        picture at a time."""
        pipeline = self.pipeline
        if isinstance(self.source, TensorPictures):
            placed = copy_to(positions, self.source.pictures.device)
            made = self._augmented_epoch(pipeline, epoch) if pipeline.random and _at_once_on(placed.device) else None
            if made is not None:  # an accelerator: this epoch's crops and flips were made for every picture at once
                images = made.index_select(0, placed)
                images = images if self._uint8_out else pipeline.to_float(images)
                return images if self.tensor_transform is None else self.tensor_transform(images)
            raw = self.source.read_many(placed)
            if self.picture_transform is not None:
                raw = self.picture_transform(raw)
            if pipeline.random:
                drawn = self._host_draws(pipeline, raw, positions, epoch)
                seeds = sample_seeds(self.seed, epoch, self.ids[positions]) if drawn is None else []
                images = pipeline.batch(raw, seeds, to_float=not self._uint8_out, drawn=drawn)
            else:
                images = raw if self._uint8_out else pipeline.to_float(raw)
            if images is not None:
                return self._finished(images) if self.tensor_transform is None else self.tensor_transform(images)
        return self._finished(torch.stack([self.picture(int(p), epoch, to_float=not self._uint8_out)
                                           for p in positions]))  # fmt: skip

    def _finished(self, images: torch.Tensor) -> torch.Tensor:
        """``images`` as this split serves them: normalised float32, or (:meth:`serving_uint8`) the
        uint8 pictures when they are uint8 (anything else is normalised here)."""
        if self._uint8_out and images.dtype != torch.uint8:
            return self.pipeline.to_float(images)
        return images

    def serving_uint8(self) -> ImageDataset | None:
        """This training split serving its augmented pictures as uint8, for the training process
        to normalise on its GPU (:mod:`modforge.data.device_finish`: a quarter of the bytes through
        the workers and the bus) — or None where something after the crops and flips needs floats:
        a float transform (random erasing), batch mixing, a tensor transform."""
        if not self.train or self.pipeline.after or self.mixing is not None or self.tensor_transform is not None:
            return None
        served = copy.copy(self)
        served._uint8_out = True
        return served

    _EPOCH_CHUNK = 8192
    """Pictures augmented in one go when a split makes its epoch at once (bounds the index maps'
    memory: ~8 bytes a pixel of the chunk, 64 MiB for 8,192 CIFAR pictures)."""

    def _augmented_epoch(self, pipeline: ImagePipeline, epoch: int) -> torch.Tensor | None:
        """Every picture of the split after ``epoch``'s crops and flips (uint8, by position), made on
        the pictures' device at the epoch's first batch, when the pipeline's draws can be made at
        once (:func:`.batched.draws_at_once`; no float transform after them): each batch then gathers
        its pictures and normalises them — a few launches instead of ~40 small ones a batch, and no
        draws computed on the host while the device waits, as airbench's loader augments a whole
        epoch. The same pictures as batch by batch (each sample's draws are its own); it holds a
        second copy of the split's pictures on the device for the epoch. None: made per batch."""
        from .batched import draws_at_once

        pictures = self.source.pictures  # type: ignore[union-attr]
        key = (epoch, pictures.device)
        if self._epoch_pictures is not None and self._epoch_pictures[0] == key:
            return self._epoch_pictures[1]
        first = pictures[:1] if self.picture_transform is None else self.picture_transform(pictures[:1])
        plan = pipeline.plan(*first.shape[-2:]) if len(pictures) else None
        if plan is None or pipeline.after or not draws_at_once(plan):
            return None
        self._epoch_pictures = None  # the last epoch's pictures go before this epoch's are made
        draws = self._epoch_draws(epoch, len(plan.draws), pictures.device)
        made: torch.Tensor | None = None
        for start in range(0, len(pictures), self._EPOCH_CHUNK):  # one chunk's maps and pictures at a time
            chunk = pictures[start:start + self._EPOCH_CHUNK]
            if self.picture_transform is not None:  # a fixed transform of each picture (a task's permutation)
                chunk = self.picture_transform(chunk)
            out = plan(chunk, draws[start:start + self._EPOCH_CHUNK])
            if made is None:
                made = out.new_empty((len(pictures), *out.shape[1:]))
            made[start:start + len(out)] = out
        self._epoch_pictures = (key, made)
        return made

    def _host_draws(self, pipeline: ImagePipeline, raw: torch.Tensor, positions: torch.Tensor,
                    epoch: int) -> torch.Tensor | None:  # fmt: skip
        """The batch's draws (``[B, K]``) from the epoch's table on the host, made for every sample at
        the epoch's first batch where the draws can be made at once (:func:`.batched.draws_at_once`, no
        float transform after them). A batch's own seeding recurrence costs ~1.5 ms however few its
        pictures (numpy's per-call overhead, ~400 steps), the whole split's ~1 ms per 1,000 pictures
        once an epoch. The same numbers: each sample's draws are its own. None: drawn per batch."""
        from .batched import draws_at_once
        from .mersenne import first_outputs
        from .transforms import sample_seed_array

        plan = pipeline.plan(*raw.shape[-2:])
        if raw.device.type != "cpu" or plan is None or pipeline.after or not plan.draws or not draws_at_once(plan):
            return None
        key = (epoch, len(plan.draws))
        if self._host_table is None or self._host_table[0] != key:
            seeds = sample_seed_array(self.seed, epoch, self.ids)
            self._host_table = (key, torch.from_numpy(first_outputs(seeds, len(plan.draws)).astype("int64")))
        return self._host_table[1][positions]

    _EPOCHS_DRAWN = 8
    """Epochs whose draws are made together: the seeding recurrence costs ~2,000 small launches
    whatever the number of seeds, so once for eight epochs instead of at every epoch's start."""

    def _epoch_draws(self, epoch: int, count: int, device: torch.device) -> torch.Tensor:
        """Every sample's ``count`` draws for ``epoch`` (``[N, count]``, by position) on ``device``,
        from a block of :data:`_EPOCHS_DRAWN` epochs made at once (a resumed run starts a block at
        its own epoch: the draws of an epoch do not depend on the block it was made in)."""
        from .mersenne import first_outputs_on
        from .transforms import sample_seed_array

        block = self._draw_block
        if block is None or block[1:3] != (count, device) or not block[0] <= epoch < block[0] + len(block[3]):
            epochs = range(epoch, epoch + self._EPOCHS_DRAWN)
            seeds = torch.cat([torch.from_numpy(sample_seed_array(self.seed, e, self.ids).astype("int64"))
                               for e in epochs])  # fmt: skip
            table = first_outputs_on(copy_to(seeds, device), count).view(len(epochs), len(self.ids), count)
            block = self._draw_block = (epoch, count, device, table)
        return block[3][epoch - block[0]]

    def to_device(self, device: torch.device | str) -> ImageDataset:
        """This split with its pictures and labels held on ``device`` (ids stay on the host: they
        seed the draws). Only an in-memory split can move; a folder's pictures are decoded from
        files (a ValueError says so)."""
        if not isinstance(self.source, TensorPictures):
            raise ValueError("its pictures are decoded from files one at a time (a folder corpus); only corpora "
                             "held in memory (MNIST family, CIFAR, tensor sets) can live on the device")  # fmt: skip
        placed = self._like(self.source.to(device), self.labels.to(device), self.ids, self.train)
        placed.epoch = self.epoch
        return placed

    def __getitems__(self, positions: Sequence[int]) -> dict[str, torch.Tensor]:
        epoch = getattr(positions, "epoch", self.epoch)
        idx = torch.as_tensor(list(positions), dtype=torch.long)
        images = self.images(idx, epoch)
        labels = self.labels[copy_to(idx, self.labels.device)]
        if self.train and self.mixing is not None:
            with SampleRandomness.kept():
                SampleRandomness.seed(sample_seed(self.seed, epoch, int(self.ids[idx[0]]), stream=1))
                images, labels = self.mixing(images, labels)
        return {"input": images, "label": labels, "index": copy_to(self.ids[idx], labels.device)}


def _at_once_on(device: torch.device) -> bool:
    """Whether a split held on ``device`` makes each epoch's crops and flips for every picture at once
    (:meth:`ImageDataset._augmented_epoch`): on an accelerator, where a batch's ~40 small launches
    cost more than one gather; on the CPU a batch's own operations cost the same either way."""
    return device.type != "cpu"


class JoinedImageDataset(Dataset):
    """Picture splits served one after another, each sample as its own part serves it (its pipeline
    and fixed transforms; see the module doc) — the tasks of a domain-incremental sequence joined.
    Batch mixing, when the first part mixes, mixes the joined batch (seeded as :class:`ImageDataset`
    seeds it). ``labels`` and ``ids`` are the parts' in order.

    Args:
        parts: the splits, in order (a joined part's own parts are taken in its place).
    """

    def __init__(self, parts: Sequence[ImageDataset | JoinedImageDataset]):
        flat: list[ImageDataset] = []
        for part in parts:
            flat.extend(part.parts if isinstance(part, JoinedImageDataset) else [part])
        if not flat:
            raise ValueError("nothing to join")
        self.parts = flat
        self.labels = torch.cat([p.labels for p in flat])
        self.ids = torch.cat([p.ids for p in flat])
        self.train, self.seed, self.mixing = flat[0].train, flat[0].seed, flat[0].mixing
        self._starts = torch.tensor([0, *torch.tensor([len(p) for p in flat]).cumsum(0).tolist()])
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.labels)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        for part in self.parts:
            part.set_epoch(epoch)

    def _locate(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if len(positions) and (int(positions.min()) < 0 or int(positions.max()) >= len(self)):
            raise IndexError(f"position out of range for {len(self)} samples")
        part = torch.bucketize(positions, self._starts[1:], right=True)
        return part, positions - self._starts[part]

    def subset(self, positions: Sequence[int] | torch.Tensor, *, train: bool | None = None) -> JoinedImageDataset:
        """The samples at ``positions``, in that order (each served as before)."""
        idx = torch.as_tensor(positions, dtype=torch.long)
        part, local = self._locate(idx)
        runs, start = [], 0
        for end in [*(torch.nonzero(part[1:] != part[:-1]).reshape(-1) + 1).tolist(), len(idx)]:
            if end > start:
                runs.append(self.parts[int(part[start])].subset(local[start:end], train=train))
            start = end
        return JoinedImageDataset(runs)

    def to_device(self, device: torch.device | str) -> JoinedImageDataset:
        """Every part held on ``device`` (see :meth:`ImageDataset.to_device`)."""
        placed = JoinedImageDataset([part.to_device(device) for part in self.parts])
        placed.set_epoch(self.epoch)
        return placed

    def picture(self, position: int, epoch: int | None = None) -> torch.Tensor:
        part, local = self._locate(torch.tensor([position]))
        return self.parts[int(part)].picture(int(local), self.epoch if epoch is None else epoch)

    def __getitem__(self, position: int) -> dict[str, torch.Tensor]:
        return {"input": self.picture(position), "label": self.labels[position], "index": self.ids[position]}

    def __getitems__(self, positions: Sequence[int]) -> dict[str, torch.Tensor]:
        epoch = getattr(positions, "epoch", self.epoch)
        idx = torch.as_tensor(list(positions), dtype=torch.long)
        part, local = self._locate(idx)
        images: list[torch.Tensor | None] = [None] * len(idx)
        for k in part.unique().tolist():
            where = torch.nonzero(part == k).reshape(-1)
            served = self.parts[k].images(local[where], epoch)
            for i, image in zip(where.tolist(), served, strict=True):
                images[i] = image
        batch, labels = torch.stack(images), self.labels[copy_to(idx, self.labels.device)]  # type: ignore[arg-type]
        if self.train and self.mixing is not None:
            with SampleRandomness.kept():
                SampleRandomness.seed(sample_seed(self.seed, epoch, int(self.ids[idx[0]]), stream=1))
                batch, labels = self.mixing(batch, labels)
        return {"input": batch, "label": labels, "index": copy_to(self.ids[idx], labels.device)}
