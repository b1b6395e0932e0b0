"""From a corpus's pictures and labels to :class:`~modforge.data.base.DataSplits`: the
configured transforms (``data.transforms``) as pipelines, a validation split carved from the
training pictures when the corpus has none (stratified, seeded), what export and predict must
know about the pictures (size, channels, normalisation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...core.errors import ConfigError
from ...core.layouts import Layout
from ..base import DataSplits
from ..splits import held_out_count, held_out_split
from .dataset import ImageDataset, Source
from .mixing import mixing_from_config
from .transforms import make_pipeline

__all__ = ["TRANSFORM_KEYS", "check_transforms_section", "picture_splits", "stratified_positions"]

TRANSFORM_KEYS = ("train", "eval", "mix", "batched")
"""What ``data.transforms`` may hold: the training list, the evaluation list, batch mixing, and
whether in-memory batches may be augmented whole (``batched``, default true: the same pictures)."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
"""The normalisation of ImageNet-pretrained backbones: the default for folders of colour pictures."""


def _section(transforms: Any, path: str) -> dict[str, Any]:
    if transforms is None:
        return {}
    if not isinstance(transforms, dict):
        raise ConfigError(f"expected a mapping with {', '.join(TRANSFORM_KEYS)}, got {transforms!r}", path=path)
    unknown = sorted(set(transforms) - set(TRANSFORM_KEYS))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(map(str, unknown))} (expected {', '.join(TRANSFORM_KEYS)})",
                          path=path)  # fmt: skip
    if not isinstance(transforms.get("batched", True), bool):
        raise ConfigError(f"expected true or false, got {transforms['batched']!r}", path=f"{path}.batched")
    return transforms


def check_transforms_section(transforms: Any, path: str = "data.transforms") -> None:
    """Validate ``data.transforms`` without any data: names, arguments, mixing keys."""
    section = _section(transforms, path)
    make_pipeline(section.get("train"), f"{path}.train", None, None)
    make_pipeline(section.get("eval"), f"{path}.eval", None, None)
    mixing_from_config(section.get("mix"), 2, f"{path}.mix")


def _picture_steps(pipeline) -> list[list[Any]] | None:
    """The evaluation pipeline's geometry as steps ``modforge predict`` repeats on a picture file
    without torch: ``["resize", [shorter side] | [h, w]]`` and ``["center_crop", [h, w]]``. None
    when the list holds anything else (predict then resizes the picture to the model's size)."""
    steps: list[list[Any]] = []
    for transform in [*pipeline.before, *pipeline.after]:
        kind = type(transform).__name__
        if kind == "Resize" and getattr(transform, "max_size", None) is None:
            steps.append(["resize", [int(v) for v in transform.size]])
        elif kind == "CenterCrop":
            steps.append(["center_crop", [int(v) for v in transform.size]])
        else:
            return None
    return steps


def stratified_positions(labels: torch.Tensor, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(kept, held-out) positions: ``fraction`` of the samples held out with each class's
    share (scikit-learn's draw, seeded: :func:`~modforge.data.splits.held_out_split`; a plain
    seeded draw when the data is too small to give every class a place on both sides), both sorted."""
    counts = torch.bincount(labels)
    classes, held = int((counts > 0).sum()), held_out_count(fraction, len(labels))
    # stratified when it can be: every class twice or more, and room for each class on both sides
    stratifiable = int(counts[counts > 0].min()) >= 2 and min(held, len(labels) - held) >= classes
    kept, held = held_out_split(labels.numpy(), fraction, seed, stratify=stratifiable)
    return torch.as_tensor(sorted(kept.tolist())), torch.as_tensor(sorted(held.tolist()))


def picture_splits(
    *,
    train: tuple[Source, torch.Tensor],
    test: tuple[Source, torch.Tensor] | None,
    val: tuple[Source, torch.Tensor] | None = None,
    class_names: Sequence[str],
    seed: int,
    val_fraction: float,
    transforms: Any,
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    described: str,
) -> DataSplits:
    """DataSplits of pictures (see the module doc).

    Args:
        train, val, test: each split's pictures and labels (``val`` None: carved from train
            when ``val_fraction`` > 0).
        class_names: the classes in label order.
        seed: seeds the validation carve and every sample's augmentation.
        val_fraction: share of the training pictures held out for validation (when no val).
        transforms: the ``data.transforms`` mapping (None: none; pictures are only normalised).
        mean, std: the corpus's normalisation (replaced by a ``normalize`` in the lists).
        described: what the raw values are, recorded with the normalisation.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    section = _section(transforms, "data.transforms")
    batched = section.get("batched", True)
    train_pipe, mean, std = make_pipeline(section.get("train"), "data.transforms.train", mean, std, batched)
    eval_pipe, eval_mean, eval_std = make_pipeline(section.get("eval"), "data.transforms.eval", mean, std, batched)
    if (eval_mean, eval_std) != (mean, std):
        raise ConfigError(f"the evaluation list normalises with mean={eval_mean} std={eval_std}, training with "
                          f"mean={mean} std={std}; name normalize once (in train) or alike in both",
                          path="data.transforms.eval")  # fmt: skip
    mixing = mixing_from_config(section.get("mix"), len(class_names), "data.transforms.mix")

    def split(part: tuple[Source, torch.Tensor], is_train: bool, ids: torch.Tensor | None = None) -> ImageDataset:
        return ImageDataset(part[0], part[1], train_pipeline=train_pipe, eval_pipeline=eval_pipe, train=is_train,
                            seed=seed, mixing=mixing, ids=ids)  # fmt: skip

    pool = split(train, True)
    if len(pool) == 0:
        raise ValueError("the training split holds no pictures")
    val_set = split(val, False) if val is not None else None
    if val_set is None and val_fraction > 0:
        kept, held = stratified_positions(pool.labels, val_fraction, seed)
        pool, val_set = pool.subset(kept), pool.subset(held, train=False)
    test_set = split(test, False) if test is not None else None
    probe = (test_set or val_set or pool.subset([0], train=False)).picture(0)
    trained = pool.picture(0)
    if trained.shape != probe.shape:
        raise ConfigError(f"training pictures come out {list(trained.shape)}, evaluation pictures {list(probe.shape)}; "
                          "make the last crop/resize of data.transforms.train and .eval give one size",
                          path="data.transforms")  # fmt: skip
    channels, height, width = (int(v) for v in probe.shape)
    normalisation: dict[str, Any] = {"divide_by": 255.0, "raw": described}
    if mean is not None:
        normalisation.update(mean=list(mean), std=list(std or []))
    image = {"height": height, "width": width, "channels": channels, "ink": "light", "scale": 1.0}
    if mean is not None:
        image.update(mean=list(mean), std=list(std or []))
    steps = _picture_steps(eval_pipe)
    if steps:
        image["steps"] = steps
    return DataSplits(
        pool, val_set, test_set, num_classes=len(class_names), in_dim=channels, layout=Layout.IMAGE,
        input_shape=(channels, height, width), class_names=list(class_names), normalisation=normalisation,
        image=image,
    )  # fmt: skip
