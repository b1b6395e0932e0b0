"""``curves.png`` (losses and metrics per epoch) and ``cl_matrix.png`` (a continual run's
accuracy matrix as a heat map); matplotlib is imported only here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_accuracy_matrix", "plot_curves"]


def plot_curves(history: list[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """Two panels — losses, then every other per-epoch metric — saved as a PNG."""
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    epochs = [row["epoch"] for row in history]
    keys = [k for k in history[-1] if k not in ("epoch", "step") and isinstance(history[-1][k], (int, float))]
    losses = [k for k in keys if k.endswith("loss")]
    others = [k for k in keys if k not in losses and not k.startswith("lr")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, names, label in ((axes[0], losses, "loss"), (axes[1], others, "metric")):
        for name in names:
            ax.plot(epochs, [row.get(name) for row in history], marker="o", markersize=3, label=name)
        ax.set_xlabel("epoch")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if names:
            ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_accuracy_matrix(rows: list[list[float]], path: Path, title: str = "") -> Path | None:
    """``R[i][j]`` (accuracy on task j after training task i) as an annotated heat map."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    n = len(rows)
    grid = np.full((n, n), np.nan)
    for i, row in enumerate(rows):
        grid[i, : len(row)] = row
    fig, ax = plt.subplots(figsize=(1.0 + 0.8 * n, 0.8 + 0.8 * n))
    image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="viridis")
    for i in range(n):
        for j in range(len(rows[i])):
            ax.text(j, i, f"{100 * rows[i][j]:.0f}", ha="center", va="center",
                    color="white" if rows[i][j] < 0.6 else "black", fontsize=8)
    ax.set_xticks(range(n), [f"T{j + 1}" for j in range(n)])
    ax.set_yticks(range(n), [f"after T{i + 1}" for i in range(n)])
    ax.set_xlabel("evaluated task")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="accuracy")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
