"""One split of a COCO set as a torch dataset (:mod:`.coco`): images decoded on demand, transformed with a
generator seeded by ``(seed, epoch, index)``, and batched by :mod:`.batching`."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from .batching import collate_detection, padded_size
from .coco_records import AnnotationError, CocoCategories, CocoImage, open_listed_image
from .transforms import BoxTransforms, resized_shape

__all__ = ["CocoDetection"]


class CocoDetection(Dataset):
    """The images of one split as detection samples; batches follow :mod:`.batching`'s contract.

    Args:
        images: the split's images and annotations.
        categories: the label map.
        transforms: how an image becomes an input.
        train: training split (flip, scale and photometric jitter) or evaluation split (resize only).
        seed: seeds the training transforms together with the epoch and the sample's index.
        size_divisor: batches are padded to multiples of this.
        annotation_file: the split's COCO file (for evaluation with pycocotools), if it came from one.
        cache: keep decoded images in memory after their first read (per process).
    """

    pads_batches = False
    """Evaluation batches are padded too: padding to the batch's largest image is the detection convention, and
    the model is told each image's valid region (``image_sizes``)."""

    def __init__(
        self,
        images: Sequence[CocoImage],
        categories: CocoCategories,
        transforms: BoxTransforms,
        *,
        train: bool,
        seed: int = 0,
        size_divisor: int = 32,
        annotation_file: Path | None = None,
        cache: bool = False,
    ):
        if size_divisor < 1:
            raise ValueError(f"size_divisor must be at least 1, got {size_divisor}")
        self.images = list(images)
        self.categories, self.transforms = categories, transforms
        self.train, self.seed, self.size_divisor = train, int(seed), int(size_divisor)
        self.annotation_file, self.cache = annotation_file, cache
        self.epoch = 0
        self._cache: dict[int, Image.Image] = {}

    def __len__(self) -> int:
        return len(self.images)

    @property
    def num_classes(self) -> int:
        return len(self.categories.ids)

    @property
    def class_names(self) -> list[str]:
        return list(self.categories.names)

    @property
    def label_to_category(self) -> list[int]:
        """COCO category id of each contiguous label (``label_to_category[k]``)."""
        return list(self.categories.ids)

    @property
    def image_ids(self) -> torch.Tensor:
        """The COCO image id of every sample, in index order."""
        return torch.tensor([im.image_id for im in self.images], dtype=torch.long)

    def collate_fn(self, samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Batch samples of this split (padded to multiples of ``size_divisor``)."""
        return collate_detection(samples, self.size_divisor)

    def set_epoch(self, epoch: int) -> None:
        """Seed the next epoch's transforms (called by the trainer)."""
        self.epoch = int(epoch)

    def subset(self, positions: Sequence[int], *, train: bool | None = None) -> CocoDetection:
        """The images at ``positions``, as a training or evaluation split (``train``; None: as this one)."""
        return CocoDetection(
            [self.images[int(i)] for i in positions], self.categories, self.transforms,
            train=self.train if train is None else train, seed=self.seed, size_divisor=self.size_divisor,
            annotation_file=self.annotation_file, cache=self.cache,
        )  # fmt: skip

    def coco_ground_truth(self) -> dict[str, Any]:
        """This split's kept images and annotations as a COCO instances document (original category ids,
        ``[x, y, w, h]`` boxes after clipping) — what pycocotools' ``COCO`` evaluates against; equal to the
        annotation file's content unless ``skip_bad`` left entries out or boxes were clipped."""
        images, annotations = [], []
        for im in self.images:
            images.append({"id": im.image_id, "file_name": im.path.name, "width": im.width, "height": im.height})
            for box, label, crowd, area, ann_id in zip(
                im.boxes, im.labels, im.iscrowd, im.area, im.ann_ids, strict=True
            ):
                x1, y1, x2, y2 = (float(v) for v in box)
                annotations.append({
                    "id": int(ann_id), "image_id": im.image_id, "category_id": self.categories.ids[int(label)],
                    "bbox": [x1, y1, x2 - x1, y2 - y1], "area": float(area), "iscrowd": int(crowd),
                })  # fmt: skip
        categories = [
            {"id": cid, "name": name} for cid, name in zip(self.categories.ids, self.categories.names, strict=True)
        ]
        return {"images": images, "annotations": annotations, "categories": categories}

    def read(self, index: int) -> Image.Image:
        """The RGB image of sample ``index`` (original size), checked against its listed size."""
        cached = self._cache.get(index)
        if cached is not None:
            return cached
        im = self.images[index]
        try:
            with open_listed_image(im.path, im.width, im.height) as raw:  # the listed size, checked before decoding
                raw.load()
                image = raw.convert("RGB")
        except ValueError as exc:  # missing, not a picture, another size, a decompression bomb
            raise AnnotationError(f"{im.source}: {exc}") from None
        except (OSError, EOFError, SyntaxError, struct.error) as exc:
            raise AnnotationError(f"{im.source}: image file {im.path} is not a readable image "
                                  f"({str(exc)[:200]})") from None  # fmt: skip
        if self.cache:
            self._cache[index] = image
        return image

    def _rng(self, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed % (1 << 64), self.epoch, int(index)])  # numpy takes no negative seed

    def __getitem__(self, index: int) -> dict[str, Any]:
        """One sample, unbatched: ``input`` [3, h, w], ``target`` (see :mod:`.batching`), ``image_id``,
        ``orig_size`` (h, w), ``scale``, ``index``."""
        index = int(index)
        im = self.images[index]
        out = self.transforms.apply(self.read(index), im.boxes, train=self.train,
                                    rng=self._rng(index) if self.train else None)  # fmt: skip
        orig = im.boxes.copy()
        if out.flipped:  # the original boxes as the input shows them: mirrored too
            orig = np.stack([im.width - im.boxes[:, 2], im.boxes[:, 1], im.width - im.boxes[:, 0], im.boxes[:, 3]], 1)
        target = {
            "boxes": torch.from_numpy(out.boxes.astype(np.float32)).reshape(-1, 4),
            "labels": torch.from_numpy(im.labels.copy()),
            "iscrowd": torch.from_numpy(im.iscrowd.copy()),
            "area": torch.from_numpy(im.area.astype(np.float32)),
            "orig_boxes": torch.from_numpy(np.asarray(orig, dtype=np.float64)).reshape(-1, 4),
        }
        return {"input": out.input, "target": target, "image_id": im.image_id, "orig_size": (im.height, im.width),
                "scale": out.scale, "index": index}  # fmt: skip

    def __getitems__(self, indices: Sequence[int]) -> dict[str, Any]:
        """A whole batch, collated (what ``DataLoader`` calls with a batch sampler)."""
        return self.collate_fn([self[int(i)] for i in indices])

    def input_shape(self) -> tuple[int, int, int]:
        """``(3, H, W)`` of this split's first image after resizing and padding (no jitter)."""
        if not self.images:
            raise ValueError("an empty split has no input shape")
        im = self.images[0]
        h, w = resized_shape(im.height, im.width, self.transforms.scale_for(im.height, im.width))
        return (3, *padded_size(h, w, self.size_divisor))
