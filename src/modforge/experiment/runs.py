"""Run folders: ``runs/<config-name>/<timestamp>/``, never overwritten."""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.config import Config, display_path
from ..core.errors import UsageError
from ..core.safe_files import ensure_folder, write_atomic
from .run_plugins import plugin_copies

__all__ = ["RunFolderError", "create_run_dir", "new_run_dir", "open_run_folder", "plan_run_dir", "write_json"]

log = logging.getLogger("modforge.experiment")


class RunFolderError(UsageError):
    """A run folder that cannot be used (it exists and is not being resumed...)."""


def plan_run_dir(
    cfg: Config, run_dir: str | os.PathLike | None = None, root: str | os.PathLike = "runs", flag: str = "--run-dir"
) -> Path:
    """Choose the folder for a new run and check it can be made — creating nothing: ``run_dir``
    as given (it must not hold anything yet), or ``root/<config name>/<YYYYmmdd-HHMMSS>`` (a
    ``-2``, ``-3``... suffix when taken). :func:`create_run_dir` makes it, once everything
    the run needs has been built, so a bad config leaves nothing on disk.

    Raises:
        RunFolderError: ``run_dir`` exists and is not empty (resume it with ``--resume``), is
            a file, lies under a file, or the folder it would be made in is not writable.
    """
    if run_dir is not None:
        path = Path(run_dir)
        if path.exists() and not path.is_dir():
            raise RunFolderError(f"{flag} {display_path(path)}: that is a file, not a folder; nothing was changed. "
                                 f"Choose another {flag}")  # fmt: skip
        if path.exists() and any(path.iterdir()):
            raise RunFolderError(
                f"{flag} {display_path(path)}: run folder {display_path(path)} already exists and is not empty; "
                f"nothing was changed. Continue it with --resume {display_path(path)}, or choose another {flag}"
            )
        _check_creatable(path, flag)
        return path
    base = Path(root) / cfg.name / datetime.now().strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    _check_creatable(path, "the run folder")
    return path


def _check_creatable(path: Path, flag: str) -> None:
    """Refuse a folder that cannot be made or written: one under a file, or in a read-only folder."""
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise RunFolderError(f"{flag} {display_path(path)}: {display_path(existing)} is a file, not a folder; "
                             "choose another run folder")  # fmt: skip
    if existing.exists() and not os.access(existing, os.W_OK | os.X_OK):
        raise RunFolderError(f"{flag} {display_path(path)}: {display_path(existing)} is not writable; "
                             "choose another run folder")  # fmt: skip


def create_run_dir(path: Path) -> Path:
    """Make the run folder :func:`plan_run_dir` chose (an empty existing one is used as it is).

    Raises:
        RunFolderError: it cannot be made or written, or something else started a run in it meanwhile.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            raise RunFolderError(f"run folder {display_path(path)} is no longer empty (another run started in it); "
                                 "nothing was changed. Choose another --run-dir")  # fmt: skip
        fd, probe = tempfile.mkstemp(prefix=".modforge-write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise RunFolderError(f"cannot create the run folder {display_path(path)}: {exc.strerror or exc}") from None
    return path


def new_run_dir(cfg: Config, run_dir: str | os.PathLike | None = None, root: str | os.PathLike = "runs") -> Path:
    """:func:`plan_run_dir` and :func:`create_run_dir` at once (for callers with nothing to
    build first)."""
    return create_run_dir(plan_run_dir(cfg, run_dir, root))


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
    write_atomic(path, json.dumps(_clean(data), indent=2) + "\n")


def open_run_folder(cfg: Config, run_dir: Path, *, resumed: bool, restart: bool = False) -> None:
    """The run folder a run trains into, taken once data, model and trainer are built (a config that
    fails to build leaves nothing behind).

    A new run makes it, says where it is, and writes ``config.yaml`` and the plug-in copies.
    ``restart``: the folder is a run that never reached its first checkpoint, started again from
    scratch — its config is rewritten, its plug-in copies are kept. ``resumed``: the run continues in
    its own folder, or (a checkpoint resumed with ``--run-dir``) in a new one given its ``config.yaml``."""
    copies = None if resumed else plugin_copies(cfg.plugins)  # a key that cannot sign them: one error, no folder
    try:
        if resumed or restart:
            ensure_folder(run_dir, named=True)
        else:
            create_run_dir(run_dir)
            log.info("run folder: %s", display_path(run_dir))
        if not (resumed and os.path.lexists(run_dir / "config.yaml")):
            write_atomic(run_dir / "config.yaml", cfg.to_yaml())
    except OSError as exc:
        raise RunFolderError(f"cannot use the run folder {display_path(run_dir)}: {exc.strerror or exc}") from None
    if copies is not None and not (restart and (run_dir / "plugins" / "manifest.json").exists()):
        copies.write(run_dir)
