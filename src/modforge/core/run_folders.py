"""The run folder a command's target belongs to, and its one safety check before anything in it is
read — torch-free, so ``modforge train --resume RUN --nproc N`` checks the folder before it becomes
torchrun without importing torch (the workers import it; the launching process need not)."""

from __future__ import annotations

import os
from pathlib import Path

from .safe_files import check_folder

__all__ = ["check_run_folder", "run_folder_of"]


def run_folder_of(target: Path) -> Path | None:
    """The run folder a command's target belongs to: the folder itself, or the one whose
    ``checkpoints/`` holds the checkpoint file; ``None`` for a checkpoint elsewhere."""
    target = Path(target)
    if target.is_dir():
        return target
    if target.parent.name == "checkpoints":
        return target.parent.parent
    return None


def check_run_folder(target: Path) -> Path | None:
    """Check, once and before anything in it is read or written, the run folder a command
    reuses (``test``, ``train --resume``, ``export``): a link in it that leads outside it
    (or dangles, or loops), or an entry that is neither a file nor a folder, is one
    :class:`~modforge.core.safe_files.UnsafePathError` naming it. Returns the run folder.

    A run folder may come from someone else; a link planted at a name modforge writes
    (``curves.png``, ``evaluations/``) would otherwise make it write through to any file."""
    folder = run_folder_of(target)
    if folder is not None and os.path.lexists(folder):
        check_folder(folder, "run folder")
    return folder
