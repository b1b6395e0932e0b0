"""A picture of a split as the model sees it: ``modforge data show CONFIG --split train -n 16``.

The first ``n`` samples of a shuffled epoch of the split go through exactly what training
does to them (the configured transforms of that split, seeded as training seeds them, and
batch mixing for the training split), are un-normalised for display and drawn in a grid,
each titled with its class name — or, for a mixed sample, its two largest class shares.
This is the picture people check an augmentation policy with before spending GPU hours.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ..core.config import Config
from ..core.errors import UsageError
from ..core.safe_files import save_figure

__all__ = ["SPLITS", "show_samples"]

SPLITS = ("train", "val", "test")


def _title(label: torch.Tensor, names: list[str]) -> str:
    if label.ndim == 0:
        return names[int(label)]
    shares, classes = label.topk(min(2, len(label)))
    parts = [f"{names[int(c)]} {float(s):.2f}" for s, c in zip(shares, classes, strict=True) if float(s) > 0.005]
    return " / ".join(parts)


def _displayable(images: torch.Tensor, normalisation: dict[str, Any], image: dict[str, Any]) -> torch.Tensor:
    """Model inputs back to [0, 1] pictures ``[N, H, W, C]`` (the normalisation undone; inputs
    flattened for an MLP, ``[N, C·H·W]``, are laid out as the pictures they were)."""
    mean, std = normalisation.get("mean"), normalisation.get("std")
    out = images.detach().float()
    if out.dim() != 4:
        out = out.reshape(len(out), int(image["channels"]), int(image["height"]), int(image["width"]))
    if mean is not None and std is not None:
        out = out * torch.tensor(std).view(1, -1, 1, 1) + torch.tensor(mean).view(1, -1, 1, 1)
    return out.clamp(0, 1).permute(0, 2, 3, 1)


def show_samples(cfg: Config, split: str, count: int, out: Path, *, epoch: int = 0) -> dict[str, Any]:
    """Write the grid of ``count`` samples of ``split`` to ``out`` (PNG); return what was drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .runner import build_splits

    if split not in SPLITS:
        raise UsageError(f"--split: expected one of {', '.join(SPLITS)}, got {split!r}")
    splits = build_splits(cfg, int(cfg.data.get("seed") or 0))
    data = getattr(splits, split)
    if data is None:
        raise UsageError(f"this config's data has no {split} split")
    if splits.image is None or not hasattr(data, "__getitems__") or len(data) == 0:
        raise UsageError(f"dataset {cfg.data['data'].get('type')!r} does not hold pictures; data show draws "
                         "picture datasets (mnist, cifar10, image_folder, …)")  # fmt: skip
    generator = torch.Generator().manual_seed(int(cfg.data.get("seed") or 0))
    positions = torch.randperm(len(data), generator=generator)[: max(1, count)].tolist()
    if hasattr(data, "set_epoch"):
        data.set_epoch(epoch)
    batch = data.__getitems__(positions)
    pictures = _displayable(batch["input"], splits.normalisation, splits.image)
    columns = math.ceil(math.sqrt(len(positions)))
    rows = math.ceil(len(positions) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(1.9 * columns, 2.1 * rows), squeeze=False)
    titles = []
    for k, ax in enumerate(axes.flat):
        ax.axis("off")
        if k >= len(positions):
            continue
        picture = pictures[k].numpy()
        ax.imshow(picture[..., 0] if picture.shape[-1] == 1 else picture, cmap="gray" if picture.shape[-1] == 1 else None,
                  vmin=0, vmax=1, interpolation="nearest")  # fmt: skip
        titles.append(_title(batch["label"][k], splits.class_names))
        ax.set_title(titles[-1], fontsize=7)
    figure.suptitle(f"{cfg.data['data'].get('type')} — {split}, epoch {epoch}", fontsize=9)
    figure.tight_layout()
    save_figure(figure, out, dpi=110)
    plt.close(figure)
    return {"file": str(out), "samples": len(positions), "titles": titles}
