"""Pictures of a detection run: a grid of images with ground truth and detections
(``detections.png``) and each class's precision–recall curve at IoU 0.5 (``pr.png``).
matplotlib is imported only here, only when a picture is drawn."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..figures import drawing

__all__ = ["plot_detections", "plot_precision_recall"]


def plot_detections(
    images: Sequence[np.ndarray],
    truths: Sequence[tuple[np.ndarray, np.ndarray]],
    found: Sequence[np.ndarray],
    class_names: Sequence[str],
    path: Path,
    *,
    min_score: float = 0.3,
    title: str = "",
) -> None:
    """Draw each image ``[H, W, 3]`` (values in [0, 1]) with its ground truth (dashed
    white: ``(boxes [N, 4] x1y1x2y2, labels [N])``) and its detections (``[M, 6]``: x1, y1,
    x2, y2, score, label; those scoring at least ``min_score``, coloured by class, labelled
    with name and score)."""
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    count = len(images)
    cols = min(4, max(count, 1))
    rows = max(1, -(-count // cols))
    with drawing(path, rows, cols, figsize=(3.2 * cols, 3.2 * rows), squeeze=False) as (fig, axes):
        colours = colormaps["tab10"]
        for ax in axes.ravel():
            ax.axis("off")
        for ax, image, (boxes, labels), dets in zip(axes.ravel(), images, truths, found, strict=False):
            ax.imshow(np.clip(image, 0, 1))
            for (x1, y1, x2, y2), _label in zip(boxes, labels, strict=True):
                ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor="white", linestyle="--", lw=1))
            for x1, y1, x2, y2, score, label in dets[dets[:, 4] >= min_score] if len(dets) else []:
                colour = colours(int(label) % 10)
                ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=colour, lw=1.5))
                name = class_names[int(label)] if int(label) < len(class_names) else str(int(label))
                ax.text(x1, y1, f"{name} {score:.2f}", color="black", fontsize=6, va="bottom",
                        bbox={"facecolor": colour, "alpha": 0.8, "pad": 1, "lw": 0})  # fmt: skip
        if title:
            fig.suptitle(f"{title} (dashed: ground truth; coloured: detections ≥ {min_score})", fontsize=9)


def plot_precision_recall(curves: dict[str, Any], path: Path, *, title: str = "") -> None:
    """Each class's precision over COCO's 101 recall points at IoU 0.5 (points COCO marks
    -1 — recall never reached — are left out)."""
    recall = np.linspace(0.0, 1.0, 101)
    with drawing(path, figsize=(5, 4)) as (_, ax):
        for name, precision in curves.items():
            values = np.asarray(precision, dtype=float)
            keep = values > -1
            ax.plot(recall[keep], values[keep], label=str(name))
        ax.set_xlabel("recall")
        ax.set_ylabel("precision")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
        ax.set_title(title or "precision–recall at IoU 0.5", fontsize=9)
