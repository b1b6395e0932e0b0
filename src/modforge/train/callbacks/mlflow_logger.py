"""``mlflow`` — the run mirrored into MLflow, a file store in the run folder by default
(optional extra)."""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse
from urllib.request import url2pathname

from ...core.registries import register_callback
from ...core.text_safety import plain_text
from .tracker import Tracker, TrackerError, as_text, resolves_inside

log = logging.getLogger("modforge.train")

_BATCH = 100  # MLflow takes at most 100 params (1000 metrics) per log_batch call
_KEY_LENGTH = 250
_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's SQLAlchemy stores
_VALUE_LENGTH = 6000  # longer param values are cut (MLflow stores at most this much)


def mlflow_key(key: str) -> str:
    """``key`` as an MLflow param or metric name: characters MLflow refuses (anything but
    letters, digits, ``_ - . / `` and space) become ``_``; at most 250 characters."""
    return re.sub(r"[^\w.\-/ ]", "_", key)[:_KEY_LENGTH]


def is_file_store(uri: str) -> bool:
    """True for a local file store URI (a path, or ``file:``)."""
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")  # C:\\... on Windows


@register_callback("mlflow")
class MLflowLogger(Tracker):
    """Logs the run to an MLflow run: the resolved config as params (flattened,
    ``model.backbone.type`` keys, values as text), every numeric figure of each epoch as a
    metric at step = epoch, and at the end the summary's figures (``test.accuracy``...) plus
    the run folder's plots, ``summary.json`` and ``config.yaml`` as artifacts. The run is
    tagged ``modforge.run_dir`` with the run folder. A resumed run continues the same MLflow
    run; if the store no longer has it, a new run receives the whole history.

    The default store is a file store inside the run folder, ``RUN/mlruns``: it needs only
    ``mlflow-skinny`` (a ``sqlite:`` store needs SQLAlchemy and Alembic, which only the full
    ``mlflow`` package brings), costs no server and no database migration, and travels with
    the run folder. MLflow 3 refuses file stores unless ``MLFLOW_ALLOW_FILE_STORE=true``;
    with a file store this callback sets it in its own process (unless you set it). View
    the runs with ``MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri RUN/mlruns``;
    to gather many runs in one place, give them one ``tracking_uri`` (a server, a database,
    or a shared folder). Needs ``pip install "modforge[mlflow]"``.

    Args:
        tracking_uri: where runs are stored: any URI MLflow accepts (``http://host:5000``,
            ``databricks``, ``sqlite:///runs/mlflow.db``, ``file:/path/mlruns`` or a folder).
            None: ``mlruns/`` in the run folder.
        experiment: the MLflow experiment (None: the config's name).
        name: the run's name (None: the run folder's name).
        tags: extra tags of the run, ``{key: value}``.
    """

    label = "mlflow"

    def __init__(
        self,
        tracking_uri: Optional[str] = None,
        experiment: Optional[str] = None,
        name: Optional[str] = None,
        tags: Optional[dict[str, str]] = None,
    ):
        super().__init__("mlflow")
        self.tracking_uri, self.experiment, self.name = tracking_uri, experiment, name
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self._uri = tracking_uri or "RUN/mlruns"
        self._client: Any = None
        self._running = False  # a fit() is under way: marked FAILED if the process ends in it

    def _describe(self) -> str:
        return f"tracking URI {self._uri}, experiment {self.experiment or 'named after the config'}"

    def _open(self, trainer, run_id: str | None) -> tuple[str, bool]:
        from mlflow.tracking import MlflowClient

        run_dir = Path(trainer.run_dir)
        self._uri = self.tracking_uri or (run_dir / "mlruns").resolve().as_uri()
        if is_file_store(self._uri):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the file store we chose (module docstring)
        elif urlparse(self._uri).scheme.split("+")[0] in _DATABASES and importlib.util.find_spec("sqlalchemy") is None:
            raise TrackerError(f"train.callbacks: the mlflow callback's tracking URI {self._uri} is a database, which "
                               "MLflow reaches through SQLAlchemy and Alembic: pip install mlflow (mlflow-skinny "
                               "lacks them), or leave tracking_uri out for a file store in the run folder")  # fmt: skip
        self._client = client = MlflowClient(tracking_uri=self._uri)
        if run_id is not None and self._continues(run_id):
            self._check_artifacts_inside(client.get_run(run_id).info.artifact_uri, run_dir)
            client.update_run(run_id, status="RUNNING")
            self._mark_running(True)
            return run_id, True
        run = client.create_run(
            self._experiment_id(self.experiment or trainer.name or "modforge"),
            run_name=self.name or run_dir.name,
            tags={"modforge.run_dir": str(run_dir.resolve()), **self.tags},
        )
        self._check_artifacts_inside(run.info.artifact_uri, run_dir)
        self._mark_running(True)
        return run.info.run_id, False

    def _check_artifacts_inside(self, artifact_uri: str, run_dir: Path) -> None:
        """The default store lives in the run folder, which may come from someone else: its
        experiment or run records may name an artifact location anywhere (``file:///ANY/PATH``)
        and the client would write the run's files there. Refused unless it lies inside the
        run folder. (A ``tracking_uri`` the user gave is the user's own store: not checked.)"""
        if self.tracking_uri is not None:
            return
        parsed = urlparse(artifact_uri or "")
        path = Path(url2pathname(parsed.path)) if parsed.scheme in ("", "file") and parsed.path else None
        if not resolves_inside(path, run_dir):
            raise TrackerError(f"train.callbacks: the mlflow store in {run_dir / 'mlruns'} puts the run's artifacts at "
                               f"{plain_text(artifact_uri)}, outside the run folder; refused (a store inside a run folder "
                               "keeps its files there: remove its mlruns/ to start a new one)")  # fmt: skip

    def _continues(self, run_id: str) -> bool:
        """Whether the store still holds ``run_id`` (not deleted); else a warning."""
        from mlflow.exceptions import MlflowException

        try:
            run = self._client.get_run(run_id)
        except MlflowException as exc:
            if getattr(exc, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
                raise
            run = None
        if run is not None and run.info.lifecycle_stage == "active":
            return True
        log.warning("the mlflow callback starts a new run: run %s is not in %s (the whole history goes to the new run)",
                    run_id, self._uri)  # fmt: skip
        return False

    def _experiment_id(self, name: str) -> str:
        """The experiment's id, made when missing (another process may make it meanwhile)."""
        from mlflow.exceptions import MlflowException

        found = self._client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self._client.create_experiment(name)
        except MlflowException:
            found = self._client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        wanted = {mlflow_key(key): as_text(value)[:_VALUE_LENGTH] for key, value in params.items()}
        held = self._client.get_run(self.run_id).data.params  # a continued run keeps what it has
        changed = sorted(key for key, value in wanted.items() if key in held and held[key] != value)
        if changed:
            log.warning("the mlflow callback keeps the first values of params the resumed config changes (MLflow "
                        "params cannot change): %s", ", ".join(changed))  # fmt: skip
        new = [Param(key, value) for key, value in wanted.items() if key not in held]
        for start in range(0, len(new), _BATCH):
            self._client.log_batch(self.run_id, params=new[start : start + _BATCH])

    def _log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self.run_id, metrics=[Metric(mlflow_key(k), v, now, step) for k, v in metrics.items()])

    def _log_final(self, figures: dict[str, float], files: list[Path]) -> None:
        self._log_metrics(figures, step=0)
        for path in files:
            self._client.log_artifact(self.run_id, str(path))

    def _pause(self) -> None:
        self._client.set_terminated(self.run_id, status="FINISHED")  # complete even if no run end follows
        self._mark_running(False)

    def _resume(self) -> None:
        self._client.update_run(self.run_id, status="RUNNING")
        self._mark_running(True)

    def _close(self, failed: bool = False) -> None:
        if self._client is not None and self.run_id is not None:
            self._client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")
        self._mark_running(False)

    def _mark_running(self, running: bool) -> None:
        """While a fit() runs, a process that ends (an error, Ctrl-C) marks the run FAILED."""
        if running and not self._running:
            atexit.register(self._ended_in_fit)
        elif not running and self._running:
            atexit.unregister(self._ended_in_fit)
        self._running = running

    def _ended_in_fit(self) -> None:
        try:
            self._client.set_terminated(self.run_id, status="FAILED")
        except Exception:  # the process is ending; nothing to tell
            pass
