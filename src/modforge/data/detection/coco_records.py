"""What a COCO instances file is read into (:mod:`.coco`): the label map, one listed image with its kept
annotations, the count of what ``skip_bad`` left out, the error naming file and id, and the bounded opening
of an image file against its listed size — shared by the reader and the dataset that decodes the images.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image

from ...core.errors import UsageError
from ..pictures import IMAGE_FORMATS, PIXEL_MARGIN, PictureBombError, open_picture

__all__ = ["AnnotationError", "CocoCategories", "CocoImage", "SkipReport", "Verify", "open_listed_image"]

Verify = Literal["header", "exists"]


class AnnotationError(UsageError):
    """A COCO annotation file, or an image it lists, that cannot be used (located by file and id)."""


@dataclasses.dataclass
class SkipReport:
    """What ``skip_bad`` left out: bad annotations, and images (with their annotations)."""

    annotations: int = 0
    images: int = 0
    reasons: list[str] = dataclasses.field(default_factory=list)

    def add(self, reason: str, *, image: bool = False) -> None:
        """Count one left-out annotation (or, with ``image``, one image) and keep the first reasons."""
        if image:
            self.images += 1
        else:
            self.annotations += 1
        if len(self.reasons) < 5:
            self.reasons.append(reason)

    @property
    def skipped(self) -> int:
        """Entries left out in all."""
        return self.annotations + self.images

    def __str__(self) -> str:
        if not self.skipped:
            return "nothing skipped"
        more = " ..." if self.skipped > len(self.reasons) else ""
        return (f"skipped {self.annotations} bad annotation(s) and {self.images} bad image(s): "
                + "; ".join(self.reasons) + more)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class CocoCategories:
    """The label map: label ``k`` is category ``ids[k]`` called ``names[k]`` (ids increasing)."""

    ids: tuple[int, ...]
    names: tuple[str, ...]

    def label_of(self) -> dict[int, int]:
        """Category id → contiguous label."""
        return {cid: k for k, cid in enumerate(self.ids)}


@dataclasses.dataclass
class CocoImage:
    """One listed image and its kept annotations (original pixels).

    Attributes:
        image_id: COCO image id.
        path: the image file.
        width, height: the size the file lists (checked against the image).
        boxes: ``float64 [N, 4]`` x1y1x2y2, clipped to the image.
        labels: ``int64 [N]`` contiguous labels.
        iscrowd: ``bool [N]``.
        area: ``float64 [N]`` COCO's area (the box's when the file gives none).
        ann_ids: ``int64 [N]`` annotation ids.
        source: ``"<file>: image <id>"``, for messages.
    """

    image_id: int
    path: Path
    width: int
    height: int
    boxes: np.ndarray
    labels: np.ndarray
    iscrowd: np.ndarray
    area: np.ndarray
    ann_ids: np.ndarray
    source: str


def open_listed_image(file: Path, width: int, height: int) -> Image.Image:
    """``file`` opened (header only) under a decompression-bomb limit set from its listed size,
    and checked to be that size; ValueError naming the file otherwise."""
    try:
        image = open_picture(file, max_pixels=int(width * height * PIXEL_MARGIN), formats=IMAGE_FORMATS)
    except PictureBombError as exc:
        raise ValueError(f"image file {file} holds {exc.pixels} pixels, far more than the {width}×{height} the file "
                         "lists; refused as a possible decompression bomb") from None  # fmt: skip
    if image.size != (width, height):
        size = image.size
        image.close()
        raise ValueError(f"image file {file} is {size[0]}×{size[1]} px, the file lists {width}×{height}")
    return image
