"""``tensorboard`` — every epoch's metrics as TensorBoard scalars (optional extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...core.errors import UsageError
from ...core.registries import register_callback
from ...core.safe_files import inside, is_relative_name
from .base import Callback


@register_callback("tensorboard")
class TensorBoard(Callback):
    """Writes each epoch's row (losses, metrics, learning rates) to ``events.*`` files in
    the run folder (or ``subdir`` inside it), readable by ``tensorboard --logdir runs``.
    Needs the ``tensorboard`` package: ``pip install "modforge[tensorboard]"``.

    Args:
        subdir: folder inside the run folder for the event files ("" = the run folder); a
            relative path without ``..`` (the event files never go elsewhere).
    """

    order = 35
    rank_zero_only = True  # writes files / the terminal

    def __init__(self, subdir: str = ""):
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401 - checked here, used in on_fit_start
        except ImportError as exc:
            raise UsageError(
                'the tensorboard callback needs the tensorboard package: pip install "modforge[tensorboard]"'
            ) from exc
        if not isinstance(subdir, str) or (subdir and not is_relative_name(subdir)):
            raise ValueError(f"subdir must be a folder inside the run folder (relative, without '..'), got {subdir!r}")
        self.subdir = subdir
        self._writer = None

    def on_fit_start(self, trainer) -> None:
        if trainer.run_dir is None:
            return
        from torch.utils.tensorboard import SummaryWriter

        run_dir = Path(trainer.run_dir)
        log_dir = inside(run_dir, self.subdir, "the tensorboard callback's subdir") if self.subdir else run_dir
        self._writer = SummaryWriter(log_dir=str(log_dir))

    def on_epoch_end(self, trainer, row: dict[str, Any]) -> None:
        if self._writer is None:
            return
        for key, value in row.items():
            if key not in ("epoch", "step") and isinstance(value, (int, float)):
                self._writer.add_scalar(key, value, global_step=row["epoch"])
        self._writer.flush()

    def on_fit_end(self, trainer) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
