"""DET curves (Martin et al., 1997): miss rate against false-alarm rate on normal-deviate
axes, where the curves of Gaussian-like score distributions are straight lines. One curve
per system (or per attack), the EER point marked."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..figures import drawing

__all__ = ["plot_det"]

_TICKS = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95]


def plot_det(curves: Mapping[str, tuple[np.ndarray, np.ndarray, float]], path: Path, *, title: str = "") -> Path:
    """Draw ``{label: (p_fa, p_miss, eer)}`` to ``path`` (PNG) and return it."""
    from scipy.stats import norm

    low, high = 2e-3, 0.99
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with drawing(path, figsize=(5.2, 5.0)) as (_, ax):
        for label, (p_fa, p_miss, eer) in curves.items():
            x = norm.ppf(np.clip(p_fa, low, high))
            y = norm.ppf(np.clip(p_miss, low, high))
            (line,) = ax.plot(x, y, linewidth=1.5, label=f"{label} (EER {100 * eer:.2f}%)")
            point = norm.ppf(np.clip(eer, low, high))
            ax.plot([point], [point], "o", color=line.get_color(), markersize=4)
        ticks = norm.ppf(_TICKS)
        labels = [f"{100 * t:g}" for t in _TICKS]
        ax.set_xticks(ticks, labels)
        ax.set_yticks(ticks, labels)
        ax.set_xlim(norm.ppf(low), norm.ppf(high))
        ax.set_ylim(norm.ppf(low), norm.ppf(high))
        ax.plot([norm.ppf(low), norm.ppf(high)], [norm.ppf(low), norm.ppf(high)], ":", color="grey", linewidth=0.8)
        ax.set_xlabel("false alarm rate: spoof accepted (%)")
        ax.set_ylabel("miss rate: bona fide rejected (%)")
        ax.grid(True, linewidth=0.4, alpha=0.6)
        ax.legend(fontsize=7, loc="upper right")
        if title:
            ax.set_title(title, fontsize=9)
    return path
