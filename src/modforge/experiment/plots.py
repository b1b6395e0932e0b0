"""``curves.png``: losses and metrics per epoch (matplotlib is imported only when drawing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.safe_files import save_figure

__all__ = ["plot_curves"]


def plot_curves(history: list[dict[str, Any]], path: Path, title: str = "") -> Path | None:
    """Two panels — losses, then every other per-epoch metric — saved as a PNG."""
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = [row["epoch"] for row in history]
    keys = [k for k in history[-1] if k not in ("epoch", "step") and isinstance(history[-1][k], (int, float))]
    losses = [k for k in keys if k.endswith("loss")]
    others = [k for k in keys if k not in losses and not k.startswith("lr")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, names, label in ((axes[0], losses, "loss"), (axes[1], others, "metric")):
        for name in names:
            ax.plot(epochs, [row.get(name) for row in history], marker="o", markersize=3, label=name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole: no tick at 1.25
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if names:
            ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
