"""``wandb`` — the run mirrored into Weights & Biases, offline by default (optional extra)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Literal, Optional

from ...core.registries import register_callback
from ...core.safe_files import write_via_temp
from .tracker import Tracker, resolves_inside

WandbMode = Literal["auto", "offline", "online", "disabled"]

QUIET_ENV = ("WANDB_MODE", "WANDB_ERROR_REPORTING")
"""What the environment says while a run's tracker is offline or disabled (:meth:`WandbLogger._quiet`)."""


@register_callback("wandb")
class WandbLogger(Tracker):
    """Logs the run to a W&B run: the resolved config (flattened, ``model.backbone.type``
    keys), every numeric figure of each epoch at step = epoch, and at the end the summary's
    figures plus the run folder's plots, ``summary.json`` and ``config.yaml`` as run files.
    W&B's files live in the run folder, ``RUN/wandb/``.

    Offline is the default because it needs no account and no network: everything is
    written to ``RUN/wandb/offline-run-*/`` and ``wandb sync RUN/wandb/offline-run-*``
    uploads it later. ``mode: online`` logs live after ``wandb login``. A resumed run
    continues the same W&B run (same id; offline, the resumed session is a further
    ``offline-run-*`` folder that ``wandb sync`` joins to it). Needs the ``wandb``
    package (0.19.10 or newer): ``pip install "modforge[wandb]"``.

    Offline (and disabled) means no connection at all: the SDK takes its own telemetry's
    settings from the environment, not from ``wandb.init``'s mode — with ``mode: offline``
    alone, the metrics it records on every ``log`` are posted to the W&B server when the
    process exits, and its service reports errors to W&B. While the run is open the
    environment says ``WANDB_MODE`` (offline or disabled) and ``WANDB_ERROR_REPORTING=false``;
    the previous values are restored when it closes.

    Args:
        project: the W&B project (None: the config's name).
        entity: the user or team that owns the project (None: your default entity).
        name: the run's display name (None: the run folder's name).
        tags: tags of the run.
        group: a group gathering related runs (the folds of a k-fold run, a sweep).
        mode: 'offline', 'online', 'disabled' (log nothing), or 'auto': the WANDB_MODE
            environment variable when it is set, else offline.
    """

    label = "wandb"

    def __init__(
        self,
        project: Optional[str] = None,
        entity: Optional[str] = None,
        name: Optional[str] = None,
        tags: Optional[list[str]] = None,
        group: Optional[str] = None,
        mode: WandbMode = "auto",
    ):
        super().__init__("wandb")
        if mode not in ("auto", "offline", "online", "disabled"):
            raise ValueError(f"mode must be 'auto', 'offline', 'online' or 'disabled', got {mode!r}")
        self.project, self.entity, self.name, self.group = project, entity, name, group
        self.tags = list(tags or [])
        self.mode = mode
        self._run: Any = None
        self._run_dir: Path | None = None
        self._saved_env: dict[str, str | None] | None = None  # the environment before _quiet
        self._project = project or "named after the config"

    def _resolved_mode(self) -> str:
        return (os.environ.get("WANDB_MODE") or "offline") if self.mode == "auto" else self.mode

    def _describe(self) -> str:
        return f"mode {self._resolved_mode()}, project {self._project}"

    def _open(self, trainer, run_id: str | None) -> tuple[str, bool]:
        import wandb

        run_dir = self._run_dir = Path(trainer.run_dir)
        self._project = self.project or trainer.name or "modforge"
        options: dict[str, Any] = {}
        if run_id is not None:  # the run of the checkpoint: continued, its config may change (new max_epochs)
            options = {"id": run_id, "resume": "allow", "allow_val_change": True}
        self._quiet()
        try:
            self._run = self._init(wandb, run_dir, options)
        except BaseException:
            self._restore_env()
            raise
        _unlink_links_out(run_dir / "wandb", run_dir)
        return self._run.id, run_id is not None and self._run.id == run_id

    def _init(self, wandb: Any, run_dir: Path, options: dict[str, Any]) -> Any:
        return wandb.init(
            project=self._project,
            entity=self.entity,
            name=self.name or run_dir.name,
            group=self.group,
            tags=self.tags or None,
            mode=self._resolved_mode(),
            dir=str(run_dir.resolve()),  # absolute: the W&B service process has a cwd of its own
            reinit="create_new",  # our own run: never the caller's wandb.run, never finishing it
            # no symbolic links in the run folder (debug.log, latest-run, logs/debug-core.log → the cache):
            # a run folder is refused for reuse when a link in it leads outside it
            settings=wandb.Settings(symlink=False),
            **options,
        )

    def _quiet(self) -> None:
        """Unless the run is online, set the environment W&B reads its telemetry and error
        reporting from (the SDK's process-wide settings, made at the first ``wandb.init``, and
        its service process, started then) so that nothing connects anywhere; restored by
        :meth:`_restore_env` when the run closes."""
        mode = self._resolved_mode()
        if mode == "online" or self._saved_env is not None:
            return
        self._saved_env = {key: os.environ.get(key) for key in QUIET_ENV}
        os.environ.update(WANDB_MODE=mode, WANDB_ERROR_REPORTING="false")

    def _restore_env(self) -> None:
        saved, self._saved_env = self._saved_env, None
        for key, value in (saved or {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def _log_params(self, params: dict[str, Any]) -> None:
        self._run.config.update(params, allow_val_change=True)

    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def _log_final(self, figures: dict[str, float], files: list[Path]) -> None:
        self._run.summary.update(figures)
        if self._resolved_mode() == "disabled":
            return
        files_dir = Path(self._run.dir)
        for path in files:  # copies, not links: the W&B run folder stays whole when the run folder moves
            target = files_dir / path.name
            write_via_temp(target, lambda tmp, path=path: shutil.copyfile(path, tmp))  # never through a link
            self._run.save(str(target), base_path=str(files_dir), policy="now")

    def _close(self, failed: bool = False) -> None:
        run, self._run = self._run, None
        try:
            if run is not None:
                run.finish(exit_code=1 if failed else 0)
                if self._run_dir is not None:
                    _unlink_links_out(self._run_dir / "wandb", self._run_dir)
        finally:
            self._restore_env()


def _unlink_links_out(folder: Path, run_dir: Path) -> None:
    """Remove the links W&B's service leaves in the run folder that lead out of it
    (``logs/debug-core.log`` → its cache folder): a run folder holding such a link is refused
    when it is resumed or tested (a link out of a folder is what a planted one looks like).
    Only links are removed, never what they point to."""
    for current, folders, files in os.walk(folder, followlinks=False):
        for name in folders + files:
            path = Path(current) / name
            if path.is_symlink() and not resolves_inside(path, run_dir):
                path.unlink(missing_ok=True)
