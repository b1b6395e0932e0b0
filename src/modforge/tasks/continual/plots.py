"""``cl_matrix.png``: a continual run's accuracy matrix as a heat map (matplotlib is
imported only when drawing)."""

from __future__ import annotations

from pathlib import Path

from ...core.safe_files import save_figure

__all__ = ["plot_accuracy_matrix"]


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
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
