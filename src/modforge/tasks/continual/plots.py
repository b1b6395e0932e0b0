"""``cl_matrix.png``: a continual run's accuracy matrix as a heat map (matplotlib is
imported only when drawing)."""

from __future__ import annotations

from pathlib import Path

from ..figures import drawing

__all__ = ["plot_accuracy_matrix", "plot_anytime"]


def plot_accuracy_matrix(rows: list[list[float]], path: Path, title: str = "") -> Path | None:
    """``R[i][j]`` (accuracy on task j after training task i) as an annotated heat map."""
    if not rows:
        return None
    import numpy as np

    n = len(rows)
    grid = np.full((n, n), np.nan)
    for i, row in enumerate(rows):
        grid[i, : len(row)] = row
    with drawing(path, figsize=(1.0 + 0.8 * n, 0.8 + 0.8 * n)) as (fig, ax):
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
    return path


def plot_anytime(records: list[dict], path: Path, title: str = "") -> Path | None:
    """``cl_anytime.png``: mean class-IL and task-IL accuracy over the tasks seen so far against
    the optimizer step, with the task boundaries marked."""
    if not records:
        return None
    steps = [r["step"] for r in records]
    with drawing(path, figsize=(6.0, 3.2)) as (_, ax):
        ax.plot(steps, [r["class_il"] for r in records], marker=".", label="class-IL")
        ax.plot(steps, [r["task_il"] for r in records], marker=".", label="task-IL")
        for before, after in zip(records, records[1:], strict=False):
            if after["task"] != before["task"]:
                ax.axvline((before["step"] + after["step"]) / 2, color="grey", lw=0.6, ls=":")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("accuracy on the tasks seen so far")
        ax.set_ylim(0.0, 1.0)
        ax.legend(fontsize=8)
        if title:
            ax.set_title(title, fontsize=9)
    return path
