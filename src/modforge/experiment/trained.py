"""A trained run rebuilt from its checkpoint: the stored config (validated, its plug-ins from the
run's own signed copies), the experiment it builds and the checkpoint's weights in its model — for
``modforge test``, ``export``, ``predict`` and a distillation's teacher.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..core.config import Config, display_path
from ..core.errors import ConfigError
from ..core.run_folders import check_run_folder, run_folder_of
from ..data.base import DataSplits
from ..model.formats import inference_weights
from ..train.checkpoint import find_resumable, load_checkpoint, load_weights
from .experiment import Experiment
from .run_plugins import load_stored_plugins

__all__ = ["check_run_folder", "checkpoint_digest", "evaluate_checkpoint", "evaluate_split", "evaluation_stem",
           "load_trained", "run_folder_of", "trained_checkpoint", "trained_config", "trained_experiment"]


def load_trained(target: Path, which: str = "best", overrides: Sequence[str] = ()) -> tuple[Experiment, Path]:
    """The experiment a run folder or checkpoint was trained with, its model holding the
    checkpoint's weights, and the checkpoint's path (:func:`_load_trained`)."""
    exp, path, _ = _load_trained(target, which, overrides)
    return exp, path


def _load_trained(
    target: Path, which: str = "best", overrides: Sequence[str] = ()
) -> tuple[Experiment, Path, dict[str, Any]]:
    """The experiment (data and model) a run folder or checkpoint was trained with, the
    model holding the checkpoint's weights; the checkpoint's path and its whole content.

    ``target`` is a checkpoint file or a run folder (``{which}.pt``, else ``last.pt``, else
    the newest checkpoint that loads; a damaged file is skipped with a warning, never used).
    ``overrides`` (``key.path=value``) change the stored config before anything is built —
    e.g. another dataset to evaluate on: when they change
    ``data.type``, the stored dataset arguments the new dataset does not take are dropped
    (the others, such as ``audio:``, are kept).
    """
    path, payload = trained_checkpoint(target, which)
    cfg = trained_config(path, payload, overrides)
    return trained_experiment(cfg, path, payload), path, payload


def trained_checkpoint(target: Path, which: str = "best") -> tuple[Path, dict[str, Any]]:
    """The checkpoint a run folder or checkpoint file names (its folder checked first, see
    :func:`_load_trained`) and its content, read without executing anything."""
    path = Path(target)
    check_run_folder(path)
    if path.is_dir():
        return find_resumable(path, first=(f"{which}.pt", "last.pt"), using="evaluating")
    return path, load_checkpoint(path)


def trained_config(path: Path, payload: dict[str, Any], overrides: Sequence[str] = (), *,
                   own_copies: bool = True) -> Config:  # fmt: skip
    """The config stored in a checkpoint, validated, its plug-ins available: the run's own signed
    copies (``own_copies``), what the user loaded, installed entry points — never an import the
    config asks for by itself. ``own_copies=False`` (a run a stored config points at) imports no copy."""
    stored = payload.get("config")
    if not isinstance(stored, dict):
        raise ConfigError(f"{display_path(path)} holds no config (a modforge checkpoint stores the config it was "
                          "trained with); it cannot be rebuilt")  # fmt: skip
    cfg = Config(stored, {}, None)
    cfg.stored = True
    run_dir = path.parent.parent if path.parent.name == "checkpoints" and own_copies else None
    what = f"the config stored in {display_path(path)}"
    in_force = load_stored_plugins(cfg.data.get("plugins"), run_dir=run_dir, what=what)
    if in_force != cfg.plugins:
        cfg.data["plugins"] = in_force
    return _overridden(cfg, overrides) if overrides else _validated_stored(cfg, what)


def trained_experiment(cfg: Config, path: Path, payload: dict[str, Any], splits: DataSplits | None = None) -> Experiment:
    """The experiment of a stored config (on ``splits`` when given: no dataset is built), its model
    holding the checkpoint's weights (the weight average, when the run kept one)."""
    exp = Experiment.build(cfg, splits, init_weights=False)
    _load_weights(exp.model, inference_weights(payload), path)
    for extension in exp.extensions:  # evaluated and exported as it is for evaluation (train.qat: ranges frozen)
        extension.set_training(exp.model, False)
    return exp


def _validated_stored(cfg: Config, what: str) -> Config:
    """A stored config checked like a config file (it is data from a file like any other)."""
    from .schema import validate_config

    try:
        return validate_config(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{what} is not a valid config: {exc}") from None


def _load_weights(model: torch.nn.Module, state: Any, path: Path) -> None:
    """The checkpoint's weights into the model rebuilt from its config; a misfit is one message."""
    load_weights(model, state, display_path(path))


def _overridden(cfg: Config, overrides: Sequence[str]) -> Config:
    """``cfg`` with ``overrides`` applied (a switched dataset or part drops the old type's
    arguments: :mod:`modforge.core.retype`) and validated."""
    from .schema import apply_overrides, validate_config

    return validate_config(apply_overrides(cfg, overrides))


def checkpoint_digest(path: Path) -> str:
    """The SHA-256 of a checkpoint file's bytes (what an evaluation's record says it evaluated)."""
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def evaluation_stem(checkpoint: Path, split: str, overrides: Sequence[str], out_dir: Path | None = None) -> str:
    """``best-test-`` — the name prefix of an evaluation's files; with overrides (another
    dataset...), their digest too, so evaluations on other data never replace each other.

    An evaluation never replaces one of *other weights*: when ``out_dir`` already holds the
    record (``<stem>.json``) of an evaluation of a checkpoint with other content (``best.pt``
    has changed since), the stem also gets a digest of this checkpoint's content
    (``best-test-1a2b3c4d-``). Evaluating the same weights again replaces its own files."""
    import hashlib
    import json

    stem = f"{checkpoint.stem}-{split}-"
    if overrides:
        stem += hashlib.sha1("\n".join(overrides).encode()).hexdigest()[:8] + "-"
    record = out_dir / f"{stem.rstrip('-')}.json" if out_dir is not None else None
    if record is None or not record.exists():
        return stem
    digest = checkpoint_digest(checkpoint)
    try:
        earlier = json.loads(record.read_text()).get("checkpoint_sha256")
    except (OSError, ValueError, AttributeError, RecursionError):  # a damaged or crafted record: a new name
        earlier = None
    return stem if earlier == digest else f"{stem}{digest[:8]}-"


def evaluate_checkpoint(
    target: Path, *, split: str = "test", which: str = "best", overrides: Sequence[str] = ()
) -> tuple[dict[str, Any], Path]:
    """Rebuild data and model from a checkpoint's config, load its weights, evaluate ``split``
    with the run's task. Files the task writes (a spoofing run's score file and DET plot) go
    to the run's ``evaluations/`` folder, named by :func:`evaluation_stem`.

    Returns:
        ``({split: {metric: value}, ...}, checkpoint path)``.
    """
    exp, path, payload = _load_trained(target, which, overrides)
    out_dir = path.parent.parent / "evaluations" if path.parent.name == "checkpoints" else None
    stem = evaluation_stem(path, split, overrides, out_dir)
    return exp.task.evaluate(exp, payload, split, out_dir=out_dir, stem=stem, what=f"the dataset of {path}"), path


def evaluate_split(exp: Experiment, split: str, *, out_dir: Path | None, stem: str, what: str) -> dict[str, Any]:
    """Evaluate ``exp.model`` as it is (no checkpoint: a config's ``model.init`` weights) on one
    split with the task's report (metrics, and the files the task writes into ``out_dir``: a
    spoofing run's scores, per-attack table, DET plot).

    Raises:
        UsageError: the dataset has no such split (``what`` names the dataset's source).
    """
    return exp.task.evaluate(exp, {}, split, out_dir=out_dir, stem=stem, what=what)
