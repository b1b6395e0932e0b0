"""Run folders: ``runs/<config-name>/<timestamp>/``, never overwritten."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.config import Config, display_path
from ..core.errors import UsageError

__all__ = ["RunFolderError", "new_run_dir", "write_json"]


class RunFolderError(UsageError):
    """A run folder that cannot be used (it exists and is not being resumed...)."""


def new_run_dir(cfg: Config, run_dir: str | os.PathLike | None = None, root: str | os.PathLike = "runs") -> Path:
    """Create the folder for a new run: ``run_dir`` as given (must not hold anything yet),
    or ``root/<config name>/<YYYYmmdd-HHMMSS>`` (a ``-2``, ``-3``... suffix on collisions).

    Raises:
        RunFolderError: ``run_dir`` exists and is not empty (resume it with ``--resume``).
    """
    if run_dir is not None:
        path = Path(run_dir)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise RunFolderError(
                f"run folder {display_path(path)} already exists and is not empty; nothing was changed. "
                f"Continue it with --resume {display_path(path)}, or choose another --run-dir"
            )
        path.mkdir(parents=True, exist_ok=True)
        return path
    base = Path(root) / cfg.name / datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while True:
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically (NaN/Inf become null, which JSON can hold)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_clean(data), indent=2) + "\n")
    tmp.replace(path)
