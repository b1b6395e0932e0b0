"""Transforms of an image and its boxes that move the boxes with the pixels.

Boxes are ``[N, 4]`` arrays of ``x1, y1, x2, y2`` in pixel-edge coordinates (``x = 0`` is the left edge of the
first column, a box covering columns ``a … b-1`` spans ``[a, b)``), which is what COCO's ``[x, y, w, h]``
means. With that convention every transform is exact:

* :func:`resize_scale` / :func:`resize` — keep the aspect ratio: the shorter side becomes ``min_size`` unless the
  longer side would then exceed ``max_size`` (Detectron's rule); boxes are multiplied by the one ``scale``, and
  the new size is the old one times ``scale``, rounded — so ``boxes / scale`` are the original boxes exactly
  and the pixels agree with them to half a pixel;
* :func:`hflip` — ``x1, x2 → W - x2, W - x1``;
* scale jitter — the resize scale times a factor drawn log-uniformly from ``scale_jitter``;
* :func:`photometric` — brightness, contrast and saturation factors drawn from ``1 ± strength``; boxes stay.

:class:`BoxTransforms` chains them (flip → resize with jitter → photometric → normalise) and draws every random
number from the generator it is handed — the dataset seeds it with ``(seed, epoch, index)`` so a run, and a
resumed run, sees the same samples. Evaluation applies only the resize (no jitter) and the normalisation.
Zero-padding to the size divisor happens when a batch is assembled (:mod:`.batching`), not here.

What ``torchvision.transforms.v2`` does for us, and what it does not (each checked against modforge's former
code in ``tests/test_detection_data.py``). Only v2's functional kernels are called, with parameters drawn from
the generator above: v2's random classes draw from torch's global generator, which would break exact resume.

* The flip is v2's (``horizontal_flip`` of the PIL image and of ``tv_tensors.BoundingBoxes``): bit-identical.
* The resize size and box scaling stay ours: v2 truncates the long side (``int``) where Detectron's rule rounds,
  and scales boxes by each side's rounded size ratio instead of the one ``scale`` that ``boxes / scale`` undoes;
  the pixels are Pillow's bilinear resize either way (v2's PIL kernel is the same call), kept as the direct call
  that the predictor (:mod:`modforge.tasks.detection.predict`) makes too.
* The photometric jitter stays ours: v2 clamps after each of brightness, contrast and saturation and weighs red
  0.2989 (ours: one clamp at the end, 0.299): pixels move by up to tens of levels, which would change the
  training samples of the shipped FCOS config (``photometric: 0.2``) and so its documented mAP.
* The normalisation stays ours: v2's ``(x / 255 - mean) / std`` rounds differently from ``x * (1 / 255 / std) -
  mean / std`` (by ~1e-7), which breaks the predictor's bit-for-bit parity with the dataset, and runs in torch's
  thread pool (see :func:`normalise`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "BoxTransforms",
    "Transformed",
    "hflip",
    "normalise",
    "photometric",
    "resize",
    "resize_scale",
]

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)


def resize_scale(height: int, width: int, min_size: int | None, max_size: int | None) -> float:
    """The factor that makes the shorter side ``min_size`` without the longer one exceeding ``max_size``
    (either may be None: no such bound; both None: 1)."""
    scale = 1.0 if min_size is None else min_size / min(height, width)
    if max_size is not None and max(height, width) * scale > max_size:
        scale = max_size / max(height, width)
    return scale


def resized_shape(height: int, width: int, scale: float) -> tuple[int, int]:
    """``(height, width)`` of an image resized by ``scale`` (rounded, at least 1 pixel)."""
    return max(1, int(round(height * scale))), max(1, int(round(width * scale)))


def resize(image: Image.Image, boxes: np.ndarray, scale: float) -> tuple[Image.Image, np.ndarray]:
    """The image resized by ``scale`` (bilinear, antialiased when shrinking) and the boxes times ``scale``."""
    h, w = resized_shape(image.height, image.width, scale)
    if (h, w) != (image.height, image.width):
        image = image.resize((w, h), Image.BILINEAR)
    return image, boxes * scale


def hflip(image: Image.Image, boxes: np.ndarray) -> tuple[Image.Image, np.ndarray]:
    """The image mirrored left-right and the ``[N, 4]`` boxes with it (``x1, x2 → W - x2, W - x1``, float64):
    torchvision.transforms.v2's flip kernels — Pillow's mirror and the same subtraction, so bit-identical to
    doing it by hand."""
    from torchvision import tv_tensors  # imported here: importing modforge must not load torchvision
    from torchvision.transforms.v2 import functional as F

    canvas = (image.height, image.width)
    moved = F.horizontal_flip(
        tv_tensors.BoundingBoxes(torch.tensor(boxes, dtype=torch.float64), format="XYXY", canvas_size=canvas)
    )
    return F.horizontal_flip(image), moved.as_subclass(torch.Tensor).numpy()


def photometric(pixels: np.ndarray, brightness: float, contrast: float, saturation: float) -> np.ndarray:
    """``float32 [H, W, 3]`` pixels (0…255) with brightness, contrast and saturation scaled by the given
    factors (1: unchanged), clipped to 0…255. Contrast blends with the image's mean grey level, saturation with
    each pixel's grey level (ITU-R 601 luma weights)."""
    out = pixels * brightness
    grey = out @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    out = (out - grey.mean()) * contrast + grey.mean()
    grey = out @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    out = grey[:, :, None] + (out - grey[:, :, None]) * saturation
    return np.clip(out, 0.0, 255.0).astype(np.float32)


def normalise(pixels: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """``[3, H, W]`` float tensor ``(pixels / 255 - mean) / std`` from ``[H, W, 3]`` pixels (0…255).

    Computed with numpy, single-threaded: torch's thread pool costs more than it saves on one small image and
    stalls badly when the cores are busy (data loading runs beside the model)."""
    scale = np.float32(1.0 / 255.0) / np.asarray(std, dtype=np.float32)
    shift = np.asarray(mean, dtype=np.float32) / np.asarray(std, dtype=np.float32)
    x = np.asarray(pixels, dtype=np.float32) * scale - shift
    return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))


@dataclasses.dataclass
class Transformed:
    """One image after :meth:`BoxTransforms.apply`.

    Attributes:
        input: ``[3, h, w]`` normalised float tensor.
        boxes: ``[N, 4]`` boxes in the input's pixels.
        scale: input size / original size.
        flipped: whether the image was mirrored (the boxes were mirrored with it).
    """

    input: torch.Tensor
    boxes: np.ndarray
    scale: float
    flipped: bool


@dataclasses.dataclass(frozen=True)
class BoxTransforms:
    """How an image and its boxes become a model input.

    Args:
        min_size: shorter side after resizing (None: no lower bound; the image keeps its size unless
            ``max_size`` applies).
        max_size: longest side after resizing, at most (None: no bound).
        hflip: probability of a horizontal flip in training.
        scale_jitter: ``(low, high)`` range of a factor, drawn log-uniformly in training, that multiplies the
            resize scale (``(1, 1)``: none).
        photometric: strength of brightness/contrast/saturation jitter in training: each factor is drawn from
            ``[1 - photometric, 1 + photometric]`` (0: none).
        mean: per-channel mean subtracted after dividing pixels by 255.
        std: per-channel standard deviation divided by after that.
    """

    min_size: int | None = 800
    max_size: int | None = 1333
    hflip: float = 0.5
    scale_jitter: tuple[float, float] = (1.0, 1.0)
    photometric: float = 0.0
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def __post_init__(self) -> None:
        if self.min_size is not None and self.min_size < 1:
            raise ValueError(f"min_size must be a positive number of pixels or None, got {self.min_size}")
        if self.max_size is not None and self.max_size < 1:
            raise ValueError(f"max_size must be a positive number of pixels or None, got {self.max_size}")
        if self.min_size is not None and self.max_size is not None and self.max_size < self.min_size:
            raise ValueError(f"max_size ({self.max_size}) must not be below min_size ({self.min_size})")
        if not 0.0 <= self.hflip <= 1.0:
            raise ValueError(f"hflip must be a probability in [0, 1], got {self.hflip}")
        low, high = self.scale_jitter
        if not 0.0 < low <= high:
            raise ValueError(f"scale_jitter must be (low, high) with 0 < low <= high, got {list(self.scale_jitter)}")
        if not 0.0 <= self.photometric < 1.0:
            raise ValueError(f"photometric must be in [0, 1), got {self.photometric}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(
                f"mean and std need three values each, std positive; got {list(self.mean)}, {list(self.std)}"
            )

    def scale_for(self, height: int, width: int, jitter: float = 1.0) -> float:
        """The resize factor of an image of this size, times the jitter factor."""
        return resize_scale(height, width, self.min_size, self.max_size) * jitter

    def apply(self, image: Image.Image, boxes: np.ndarray, *, train: bool,
              rng: np.random.Generator | None = None) -> Transformed:  # fmt: skip
        """Transform ``image`` (RGB) and its ``[N, 4]`` boxes: in training (``rng`` required) flip, resize with
        jitter and photometric jitter, each drawn from ``rng``; in evaluation only the resize. The
        normalised result is returned with its boxes and scale."""
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        flipped, jitter, factors = False, 1.0, (1.0, 1.0, 1.0)
        if train:
            if rng is None:
                raise ValueError("training transforms need a random generator")
            draws = rng.random(5)  # always five draws, whatever is enabled: settings never reshuffle each other
            flipped = bool(draws[0] < self.hflip)
            low, high = self.scale_jitter
            jitter = math.exp(math.log(low) + draws[1] * (math.log(high) - math.log(low)))
            factors = tuple(1.0 + self.photometric * (2.0 * float(u) - 1.0) for u in draws[2:5])  # type: ignore[assignment]
        if flipped:
            image, boxes = hflip(image, boxes)
        scale = self.scale_for(image.height, image.width, jitter)
        image, boxes = resize(image, boxes, scale)
        pixels = np.asarray(image, dtype=np.float32)
        if factors != (1.0, 1.0, 1.0):
            pixels = photometric(pixels, *factors)
        return Transformed(normalise(pixels, self.mean, self.std), boxes, scale, flipped)
