"""matplotlib for the tasks' pictures (DET curves, detections, accuracy matrices), imported only
when one is drawn: :func:`drawing` opens a figure on the headless Agg backend and finishes it the
one way every task's picture is finished — laid out, written through
:func:`~modforge.core.safe_files.save_figure` at 110 dpi, and closed even when drawing or writing
fails (a figure left open keeps its memory for the rest of the run)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..core.safe_files import save_figure

__all__ = ["drawing"]


@contextmanager
def drawing(path: str | os.PathLike, *grid: int, **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """``with drawing(path, figsize=(5, 4)) as (fig, ax):`` — ``plt.subplots(*grid, **subplots)``,
    written to ``path`` (format from the suffix) when the block ends without an error."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(*grid, **subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
