"""What ``modforge export`` adds to an artifact's metadata so that ``modforge predict`` can check
its inputs: the training pictures' *contract* (sampled once from the training split, stored next
to the picture normalisation in ``input.image.contract``) and the checkpoint it was exported
from (``source``). The statistics are :func:`~modforge.engines.picture_contract.describe_pictures`'s,
the very function predict describes an input picture with."""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data.base import DataSplits
from ..engines.artifact_source import source_record
from ..engines.picture_contract import describe_pictures, picture_space

__all__ = ["SAMPLED_PICTURES", "record_input_contract", "training_contract"]

SAMPLED_PICTURES = 128
"""Training pictures sampled (evenly spaced through the split) for the contract."""
SIZED_FILES = 32
"""Picture files whose headers are read for the training pictures' typical size."""
log = logging.getLogger("modforge.experiment")


def record_input_contract(metadata: dict[str, Any], splits: DataSplits, checkpoint: Path) -> None:
    """Add ``input.image.contract`` (pictures only) and ``source`` to an export's ``metadata``."""
    image = (metadata.get("input") or {}).get("image")
    if isinstance(image, dict):
        contract = training_contract(splits)
        if contract is not None:
            metadata["input"]["image"] = {**image, "contract": contract}  # a copy: the splits' own entry stays
    metadata["source"] = source_record(checkpoint)


def training_contract(splits: DataSplits, sample: int = SAMPLED_PICTURES) -> dict[str, Any] | None:
    """The contract of the training split's pictures as the evaluation split serves them (no
    augmentation), or None when the inputs are not pictures of the artifact's shape (e.g. a task
    that flattens them)."""
    image, train = splits.image, splits.train
    if not image or len(train) == 0:
        return None
    positions = sorted({int(round(p)) for p in np.linspace(0, len(train) - 1, min(len(train), sample))})
    inputs, source = _served(train, positions)
    expected = (int(image.get("channels", 1)), int(image["height"]), int(image["width"]))
    if inputs.ndim != 4 or tuple(inputs.shape[1:]) != expected:
        log.debug("no input contract recorded: training inputs of shape %s are not %s pictures",
                  list(inputs.shape), list(expected))  # fmt: skip
        return None
    values = picture_space(inputs.detach().float().cpu().numpy(), image)
    return describe_pictures(values, _source_size(source, positions))


def _served(train: Any, positions: list[int]) -> tuple[torch.Tensor, Any]:
    """The samples at ``positions`` as evaluation serves them, and the picture source they came from."""
    try:
        view = train.subset(positions, train=False)
    except (AttributeError, TypeError):
        view = None
    if view is not None and hasattr(view, "__getitems__"):
        return torch.as_tensor(view.__getitems__(list(range(len(view))))["input"]), getattr(view, "source", None)
    return torch.stack([torch.as_tensor(train[p]["input"]) for p in positions]), None


def _source_size(source: Any, positions: list[int]) -> tuple[int, int] | None:
    """The training pictures' typical ``(height, width)`` before the evaluation transforms: an
    in-memory corpus's own size, or the median of a few picture files' sizes (headers only);
    None: the model's input size stands for it."""
    shape = getattr(source, "shape", None)
    if isinstance(shape, tuple) and len(shape) == 3:
        return int(shape[1]), int(shape[2])
    files = getattr(source, "files", None)
    if not files:
        return None
    from PIL import Image

    sizes = []
    for path in list(files)[:SIZED_FILES]:
        try:
            with Image.open(path) as picture:
                sizes.append(picture.size)
        except (OSError, ValueError):  # a file that does not open: trained on anyway, just not measured here
            continue
    if not sizes:
        return None
    return int(statistics.median(h for _, h in sizes)), int(statistics.median(w for w, _ in sizes))
