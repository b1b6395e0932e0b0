"""What the experiment-tracker callbacks (``wandb``, ``mlflow``) share: one life cycle.

A tracker callback mirrors a run into an outside tracker: the resolved config as
parameters (flattened to ``model.backbone.type`` keys), every numeric figure of each
epoch's row as a metric at step = epoch, and, once the run folder is complete, its plots
(``*.png``), ``summary.json`` and ``config.yaml`` as files of the tracker run, with the
summary's numbers as final figures.

Life cycle. The tracker run opens at the first :meth:`~Callback.on_fit_start` and stays
open across further ``fit()`` calls (a continual run fits once per task); it is closed by
:meth:`~Callback.on_run_end`, which the runner calls after writing ``summary.json`` and
the plots (a :class:`~modforge.train.trainer.Trainer` used on its own never calls it:
the library then closes the run when the process exits). The callback's state (the
tracker's run id, how many epochs it holds) is part of every checkpoint, so a resumed run
continues the same tracker run and sends it the epochs it is missing.

Failures. A tracker that cannot start (bad tracking URI, no login, unreachable server)
is one :class:`TrackerError` at fit start, before any epoch runs; the run folder and its
checkpoints are untouched. A tracker that fails later never stops training: one warning,
then this session logs nothing more to it (a resume sends the missing epochs).
"""

from __future__ import annotations

import abc
import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ...core.errors import UsageError
from ...core.optional import import_extra
from .base import Callback

if TYPE_CHECKING:  # pragma: no cover
    from ..trainer import Trainer

__all__ = ["Tracker", "TrackerError", "epoch_metrics", "flatten", "resolves_inside", "run_files", "summary_figures"]

log = logging.getLogger("modforge.train")

RUN_FILES = ("summary.json", "config.yaml")
"""The run folder's files every tracker run receives at the end (with every ``*.png``)."""


class TrackerError(UsageError):
    """An experiment tracker that cannot start: its library refused the settings or the store."""


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings (and lists holding mappings or lists) as one level of dotted keys:
    ``{"model": {"losses": [{"type": "ce"}]}}`` → ``{"model.losses.0.type": "ce"}``. Lists
    of plain values stay whole (``channels: [32, 64]``); an empty mapping or list is kept
    as a value, so every key of the config appears."""
    if isinstance(data, dict) and data:
        items = ((str(key), value) for key, value in data.items())
    elif isinstance(data, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in data):
        items = ((str(i), value) for i, value in enumerate(data))
    else:
        return {prefix: data} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}" if prefix else key))
    return out


def as_text(value: Any) -> str:
    """A config value as text for trackers that store strings: strings as they are,
    everything else as JSON (``true``, ``null``, ``[32, 64]`` — as the YAML would read)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def epoch_metrics(row: dict[str, Any]) -> dict[str, float]:
    """The figures of an epoch's row a tracker plots: every number but ``epoch`` (the step)."""
    return {key: float(value) for key, value in row.items() if key != "epoch" and _is_number(value)}


def summary_figures(summary: dict[str, Any]) -> dict[str, float]:
    """The summary's finite numbers under dotted keys (``test.accuracy``, ``best.epoch``,
    ``train_seconds``), without ``last`` (the last epoch's row, already logged)."""
    flat = flatten({key: value for key, value in summary.items() if key != "last"})
    return {key: float(v) for key, v in flat.items() if _is_number(v) and math.isfinite(v)}


def run_files(run_dir: Path) -> list[Path]:
    """The finished run folder's files a tracker keeps: its plots (``curves.png``, and any
    other ``*.png`` the task wrote: ``detections.png``, ``det.png``, ``cl_matrix.png``),
    ``summary.json`` and ``config.yaml`` — those that exist."""
    plots = sorted(p for p in run_dir.glob("*.png") if p.is_file())
    return plots + [run_dir / name for name in RUN_FILES if (run_dir / name).is_file()]


def resolves_inside(path: Path | None, run_dir: Path) -> bool:
    """Whether ``path`` (a link a tracker's library left, the artifact folder its store names) resolves inside
    the run folder; a path that cannot be resolved (a loop, a name too long) does not."""
    if path is None:
        return False
    try:
        return path.resolve().is_relative_to(run_dir.resolve())
    except (OSError, RuntimeError):
        return False


def first_line(exc: BaseException) -> str:
    """An exception's message as one line (libraries' messages run over several)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class Tracker(Callback, metaclass=abc.ABCMeta):
    """The shared life cycle (module docstring); a tracker implements the abstract steps
    (``_open`` … ``_close``) with its library. Runs on rank 0 only; its order puts it before
    ``checkpoint`` so a checkpoint records the epochs the tracker holds."""

    order = 36
    rank_zero_only = True  # talks to one tracker run, as one writer
    label: ClassVar[str] = "tracker"
    """The callback's registered name, for messages."""

    def __init__(self, library: str | None = None) -> None:
        """``library``: the optional extra the tracker needs, checked now — a missing one is one line, before
        any run folder exists."""
        if library is not None:
            import_extra(library, f"the {self.label} callback", library)
        self.run_id: str | None = None  # the tracker's run, kept across resumes
        self.logged_epochs = 0  # epochs 1..logged_epochs of the history are in the tracker run
        self._active = False  # the tracker run is open in this process
        self._broken = False  # a call failed after the start: nothing more this session
        self._warned_no_folder = False

    # ---------------------------------------------------------------- what a tracker does
    @abc.abstractmethod
    def _open(self, trainer: Trainer, run_id: str | None) -> tuple[str, bool]:
        """Start a tracker run, or continue ``run_id``; return its id and whether it
        continued (False: a new run, which then receives the whole history)."""

    @abc.abstractmethod
    def _describe(self) -> str:
        """Where this tracker logs, for error messages (mode, store, project)."""

    @abc.abstractmethod
    def _log_params(self, params: dict[str, Any]) -> None:
        """Record the flattened config."""

    @abc.abstractmethod
    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Record one epoch's figures at ``step``."""

    @abc.abstractmethod
    def _log_final(self, figures: dict[str, float], files: list[Path]) -> None:
        """Record the summary's figures and the run folder's ``files``."""

    def _pause(self) -> None:
        """A ``fit()`` ended (another may follow in a continual run)."""

    def _resume(self) -> None:
        """A further ``fit()`` of the same open run starts."""

    @abc.abstractmethod
    def _close(self, failed: bool = False) -> None:
        """The run is over (``failed``: it could not go on): close the tracker run."""

    # ------------------------------------------------------------------ the hooks
    def on_fit_start(self, trainer: Trainer) -> None:
        if trainer.run_dir is None:
            if not self._warned_no_folder:
                log.warning("the %s callback logs nothing: the trainer has no run folder", self.label)
                self._warned_no_folder = True
            return
        if self._active:
            self._guarded("continuing its run", self._resume)
        else:
            self._start(trainer)
        for row in trainer.history:  # a resumed run: the epochs the tracker run does not hold yet
            if row["epoch"] > self.logged_epochs:
                self._log_epoch(row)

    def _start(self, trainer: Trainer) -> None:
        """Open (or continue) the tracker run and record the config; a failure is one
        :class:`TrackerError` naming the tracker, where it logs, and the library's reason."""
        try:
            run_id, continued = self._open(trainer, self.run_id)
            self._active = True
            if not continued:
                self.logged_epochs = 0
            self.run_id = run_id
            self._log_params(flatten(trainer.config))
        except Exception as exc:  # the libraries raise many kinds; the user needs one line
            if self._active:  # opened, then refused the config: marked failed, not left running
                self._active = False
                self._guarded("closing its run", self._close, True)
            if isinstance(exc, TrackerError):
                raise
            raise TrackerError(
                f"train.callbacks: the {self.label} callback could not start its run ({self._describe()}): "
                f"{first_line(exc)}"
            ) from None
        self._broken = False

    def on_epoch_end(self, trainer: Trainer, row: dict[str, Any]) -> None:
        if self._active:
            self._log_epoch(row)

    def _log_epoch(self, row: dict[str, Any]) -> None:
        if self._guarded(f"logging epoch {row['epoch']}", self._log_metrics, epoch_metrics(row), int(row["epoch"])):
            self.logged_epochs = int(row["epoch"])

    def on_fit_end(self, trainer: Trainer) -> None:
        if self._active:
            self._guarded("ending the fit", self._pause)

    def on_run_end(self, trainer: Trainer, summary: dict[str, Any]) -> None:
        if not self._active:
            return
        files = run_files(Path(trainer.run_dir))
        self._guarded("saving the run's files", self._log_final, summary_figures(summary), files)
        self._broken = False  # closing is worth a try even after a failure
        self._guarded("closing its run", self._close)
        self._active = False

    def _guarded(self, what: str, step: Any, *args: Any) -> bool:
        """Run a tracker call after the start; a failure is one warning and stops this
        session's logging (training goes on; a resume sends the missing epochs). True: done."""
        if self._broken:
            return False
        try:
            step(*args)
        except Exception as exc:  # a tracker hiccup must never end a training run
            self._broken = True
            log.warning("the %s callback failed %s (%s): %s; it logs nothing more in this session",
                        self.label, what, self._describe(), first_line(exc))  # fmt: skip
            return False
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "logged_epochs": self.logged_epochs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run_id = state.get("run_id")
        self.logged_epochs = int(state.get("logged_epochs") or 0)
