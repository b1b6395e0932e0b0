"""Batches of images of different sizes: padded to one size, each image's boxes kept in its own target.

:func:`collate_detection` turns the samples of :class:`~modforge.data.detection.coco.CocoDetection` into the
batch every detection part reads:

==============  ==================  ===========================================================================
key             type                meaning
==============  ==================  ===========================================================================
``input``       float [B,3,H,W]     normalised images, top-left aligned, zero-padded (after normalisation) to
                                    the batch's largest height and width rounded up to ``size_divisor``
``targets``     list of B dicts     ``boxes`` float [N,4] x1y1x2y2 in the input's pixels, ``labels`` long [N]
                                    (contiguous 0…C-1), ``iscrowd`` bool [N] (COCO crowd regions: to be
                                    ignored, neither object nor background), ``area`` float [N] (COCO's area,
                                    original pixels), ``orig_boxes`` float64 [N,4] (the same boxes in the
                                    original image's pixels — mirrored too when the image was)
``image_sizes`` long [B,2]          ``(h, w)`` of each resized image before padding (the valid region)
``orig_sizes``  long [B,2]          ``(h, w)`` of each original image
``scale``       float [B]           resized / original size: ``boxes / scale`` are original pixels
``image_id``    long [B]            the COCO image id (for pycocotools evaluation)
``index``       long [B]            the sample's position in its split
==============  ==================  ===========================================================================

There is no ``label`` key: a detection batch has a variable number of labels per image, in ``targets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["collate_detection", "padded_size"]


def padded_size(height: int, width: int, size_divisor: int) -> tuple[int, int]:
    """``(height, width)`` rounded up to multiples of ``size_divisor`` (1: unchanged)."""
    d = max(1, int(size_divisor))
    return -(-height // d) * d, -(-width // d) * d


def collate_detection(samples: Sequence[dict[str, Any]], size_divisor: int = 32) -> dict[str, Any]:
    """One batch from samples ``{"input": [3, h, w], "target": {...}, "image_id", "orig_size": (h, w),
    "scale", "index"}`` (the module doc lists the keys it returns).

    Raises:
        ValueError: no samples, or inputs that are not ``[C, h, w]`` with one ``C``.
    """
    if not samples:
        raise ValueError("cannot collate an empty list of detection samples")
    inputs = [s["input"] for s in samples]
    channels = {x.shape[0] for x in inputs}
    if any(x.dim() != 3 for x in inputs) or len(channels) != 1:
        raise ValueError(f"detection inputs must be [C, h, w] with one C, got {[tuple(x.shape) for x in inputs]}")
    height, width = padded_size(max(x.shape[1] for x in inputs), max(x.shape[2] for x in inputs), size_divisor)
    shape = (len(inputs), channels.pop(), height, width)
    if all(x.device.type == "cpu" and x.dtype == torch.float32 and not x.requires_grad for x in inputs):
        padded = np.zeros(shape, dtype=np.float32)  # numpy: torch's thread pool would stall on busy cores
        for i, x in enumerate(inputs):
            padded[i, :, : x.shape[1], : x.shape[2]] = x.numpy()
        batch = torch.from_numpy(padded)
    else:
        batch = inputs[0].new_zeros(shape)
        for i, x in enumerate(inputs):
            batch[i, :, : x.shape[1], : x.shape[2]] = x
    return {
        "input": batch,
        "targets": [s["target"] for s in samples],
        "image_sizes": torch.tensor([[x.shape[1], x.shape[2]] for x in inputs], dtype=torch.long),
        "orig_sizes": torch.tensor([list(s["orig_size"]) for s in samples], dtype=torch.long),
        "scale": torch.tensor([float(s["scale"]) for s in samples], dtype=torch.float32),
        "image_id": torch.tensor([int(s["image_id"]) for s in samples], dtype=torch.long),
        "index": torch.tensor([int(s["index"]) for s in samples], dtype=torch.long),
    }
