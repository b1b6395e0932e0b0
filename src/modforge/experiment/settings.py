"""The ``train:`` and ``data:`` sections as typed settings.

Both are validated by the same signature machinery as the parts, so a typo or a wrong
type gets the same precise message (``train.max_epochs: expected int, got 'ten' (in
configs/x.yaml:7)``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import Field

from ..core.arguments import signature_of
from ..core.config import Config, check_keys
from ..core.constraints import NonNegativeInt, PositiveFloat, PositiveInt
from ..core.errors import ConfigError, ConfigValueError
from ..core.origins import typed_here
from ..core.registries import CALLBACKS, DATASETS, ENGINES, METRICS, OPTIMIZERS, SCHEDULERS
from ..core.safe_files import is_relative_name
from ..core.text_safety import plain_text
from ..data.loader import LoaderSettings
from ..train.distributed import DistributedSettings
from ..train.extension import check_extension, extension_names, refusal
from ..train.ranges import check_ranges
from ..train.trainers import resolve_trainer

MAX_THREADS = max(64, 4 * (os.cpu_count() or 1))
"""More intra-op threads than this is a mistake, not a setting (100,000 crashes OpenBLAS)."""
ThreadCount = Annotated[int, Field(gt=0, le=MAX_THREADS)]

__all__ = ["LOADER_KEYS", "HeldDestination", "RunSettings", "TrainSettings", "check_device", "held_destinations_message",
           "keep_destinations_local", "sweep_folder_of", "validate_data_section", "validate_train_section"]

LOADER_KEYS = tuple(a.name for a in signature_of(LoaderSettings).args)
DATA_KEYS = (*LOADER_KEYS, "transforms")
"""What ``data:`` holds besides the dataset's ``type``/``args``: loader settings and image transforms."""
BatchSize = Annotated[int, Field(gt=0, le=sys.maxsize)]
"""A batch size: at least 1, and no more than a sequence can hold (``sys.maxsize``)."""


class TrainSettings:
    """How to train.

    Args:
        max_epochs: number of epochs.
        max_steps: stop after this many optimizer steps (None: no limit).
        optimizer: ``{type, args, param_groups}``; default AdamW.
        scheduler: ``{type, args, interval: epoch|step, monitor}``, or None.
        metrics: metric specs computed on validation and test (None: the task's defaults —
            accuracy and loss; eer, min_dcf, accuracy and loss for spoofing).
        monitor: metric that picks ``best.pt`` and drives early stopping (None: the task's choice
            when there is a validation split — ``val_accuracy``, or ``val_eer`` for spoofing — else
            ``val_loss``/``train_loss``).
        callbacks: extra callback specs (early_stopping, lr_monitor, ...).
        checkpoint: arguments of the checkpoint callback (every_n_epochs, every_n_steps, keep_last).
        grad_clip: clip the gradient norm to this value (above 0; None: no clipping).
        accumulate: micro-batches per optimizer step (at least 1).
        precision: '32', 'bf16' (autocast, works on CPU), '16' (autocast with a grad scaler), or
            'bf16-true' / '16-true': the weights themselves stored in 16 bits (norms and frontends in
            float32; no grad scaler; see modforge.train.precision).
        device: 'auto', 'cpu', 'cuda', 'cuda:1', 'mps' — checked against this machine when the
            config is validated (a CUDA device on a machine without one is refused).
        num_threads: torch intra-op threads (None: torch's default).
        log_every: steps between reads of the loss on the host (progress, NaN checks).
        nan_guard: stop at the first non-finite loss.
        progress: 'auto' (a bar on a terminal), 'always' or 'never'.
        engine: how the model is executed: eager, torchscript or compile (an engine spec;
            onnx runs inference only — export to it after training).
        async_checkpoints: commit checkpoints in the background (the commit helper process); False: on the training thread.
        distributed: multi-process settings (torchrun): ``{backend: auto|gloo|nccl, timeout: seconds,
            find_unused_parameters: bool}``; ignored with one process.
        trainer: the Trainer class that runs the training steps — a registered name
            (:func:`modforge.train.trainers.register_trainer`) or an import path inside a loaded
            plug-in (``my_trainer.py:MyTrainer``); None: :class:`~modforge.train.trainer.Trainer`.
    """

    def __init__(
        self,
        max_epochs: PositiveInt = 10,
        max_steps: Optional[PositiveInt] = None,
        optimizer: Any = None,
        scheduler: Any = None,
        metrics: Any = None,
        monitor: Optional[str] = None,
        callbacks: Any = None,
        checkpoint: Optional[dict[str, Any]] = None,
        grad_clip: Optional[PositiveFloat] = None,
        accumulate: PositiveInt = 1,
        precision: Literal["32", "bf16", "16", "bf16-true", "16-true"] = "32",
        device: str = "auto",
        num_threads: Optional[ThreadCount] = None,
        log_every: PositiveInt = 50,
        nan_guard: bool = True,
        progress: Literal["auto", "always", "never"] = "auto",
        engine: Any = "eager",
        async_checkpoints: bool = True,
        distributed: Optional[dict[str, Any]] = None,
        trainer: Optional[str] = None,
    ):
        self.max_epochs, self.max_steps = max_epochs, max_steps
        self.optimizer = optimizer or {"type": "adamw", "args": {}}
        self.scheduler = scheduler
        self.metrics = metrics  # None: the task's defaults (accuracy and loss for classification)
        self.monitor = monitor
        self.callbacks = callbacks or []
        self.checkpoint = checkpoint or {}
        self.grad_clip, self.accumulate, self.precision = grad_clip, accumulate, precision
        self.device, self.num_threads, self.log_every = device, num_threads, log_every
        self.nan_guard, self.progress, self.engine = nan_guard, progress, engine
        self.async_checkpoints = async_checkpoints
        self.distributed = DistributedSettings(**(distributed or {}))
        self.trainer = trainer
        self.extensions: dict[str, dict[str, Any]] = {}  # train.<name> of each run extension (from_section)

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> TrainSettings:
        """The settings of a validated ``train:`` section; the sections of run extensions
        (``ema``, ``qat``, ``distill``, a plug-in's — :mod:`modforge.train.extension`) are kept
        apart in :attr:`extensions` (an extension set to null is off)."""
        names = set(extension_names(section))
        settings = cls(**{k: v for k, v in section.items() if k not in names})
        settings.extensions = {k: ({} if v is True else v) for k, v in section.items() if k in names and v is not None}
        return settings


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """The settings of a validated run config that the build reads before anything else: the seed,
    the typed ``train:`` section and the loader's part of ``data:``, read once here (by
    :meth:`Experiment.build <modforge.experiment.experiment.Experiment.build>`) instead of by each
    piece of the build that needs one of them.

    Attributes:
        seed: the top-level ``seed`` (0 when absent).
        train: the ``train:`` section, typed.
        loader: the loader settings in ``data:`` (batch size, workers...).
    """

    seed: int
    train: TrainSettings
    loader: LoaderSettings

    @classmethod
    def read(cls, cfg: Config) -> RunSettings:
        """The settings of ``cfg``, whose registered names (plug-ins included) are known by now.

        Raises:
            ConfigError: no ``data:`` section, or loader settings out of range.
        """
        train = TrainSettings.from_section(cfg.data.get("train") or {})
        data = cfg.data.get("data") or {}
        if not data:
            raise ConfigError("a training config needs a 'data:' section (e.g. data: {type: digits})", path="data")
        try:
            loader = LoaderSettings(**{k: data[k] for k in LOADER_KEYS if k in data})
        except ValueError as exc:
            raise ConfigError(str(exc), path="data", source=cfg.where("data")) from None
        return cls(int(cfg.data.get("seed") or 0), train, loader)


def _spec_list(value: Any) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


def validate_train_section(cfg: Config) -> dict[str, Any]:
    """Check ``train:`` (settings and every part spec in it); return it normalized."""
    where = cfg.where
    section = cfg.data.get("train") or {}
    common = dict(origin_of=where, allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir))
    names = extension_names(section)  # the run extensions' sections are checked by their own signatures
    if isinstance(section, dict):  # a typo is told the closest key, a run extension's name included
        from ..core.registries import EXTENSIONS

        check_keys(section, [*(a.name for a in signature_of(TrainSettings).args), *EXTENSIONS.list()],
                   path="train", what="argument", origin_of=where)  # fmt: skip
    values = signature_of(TrainSettings).validate({k: v for k, v in section.items() if k not in names}, path="train",
                                                  origin_of=where, plain=True)  # fmt: skip
    check_ranges(TrainSettings, values, path="train", origin_of=where)
    if values.get("device") is not None:
        check_device(values["device"], path="train.device", source=where("train.device"))
    if values.get("trainer") is not None:
        resolve_trainer(values["trainer"], allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir),
                        source=where("train.trainer"))  # fmt: skip
    if values.get("optimizer") is not None:
        values["optimizer"] = OPTIMIZERS.validate(
            values["optimizer"], path="train.optimizer", extras=("param_groups",), **common
        )
        _check_optimizer(values["optimizer"], cfg)
    if values.get("scheduler") is not None:
        spec = SCHEDULERS.validate(
            values["scheduler"], path="train.scheduler", extras=("interval", "monitor"), **common
        )
        obj, _sig = SCHEDULERS.resolve(spec["type"], allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir))
        check_ranges(obj, spec["args"], path="train.scheduler.args", origin_of=where)
        interval = spec.get("interval", "epoch")
        if interval not in ("epoch", "step"):
            raise ConfigValueError(
                f"expected 'epoch' or 'step', got {interval!r}",
                path="train.scheduler.interval",
                source=where("train.scheduler.interval"),
            )
        values["scheduler"] = spec
    if "metrics" in values:
        values["metrics"] = [
            METRICS.validate(m, path=f"train.metrics.{i}", **common)
            for i, m in enumerate(_spec_list(values["metrics"]))
        ]
    if "callbacks" in values:
        values["callbacks"] = [
            CALLBACKS.validate(c, path=f"train.callbacks.{i}", **common)
            for i, c in enumerate(_spec_list(values["callbacks"]))
        ]
    if values.get("engine") is not None:
        values["engine"] = ENGINES.validate(values["engine"], path="train.engine", **common)
        engine_class = ENGINES.get(values["engine"]["type"])
        capabilities = getattr(engine_class, "capabilities", None)
        if capabilities is not None and not capabilities.can_train:
            raise ConfigValueError(
                f"engine '{values['engine']['type']}' runs inference only and cannot train; train with eager, "
                f"torchscript or compile, then `modforge export RUN --engine {values['engine']['type']}`",
                path="train.engine",
                source=where("train.engine"),
            )
    if values.get("checkpoint") is not None:
        spec = CALLBACKS.validate(
            {"type": "checkpoint", "args": values["checkpoint"]}, path="train.checkpoint", **common
        )
        values["checkpoint"] = spec["args"]
    if values.get("distributed") is not None:
        values["distributed"] = _settings_section(DistributedSettings, values["distributed"], "train.distributed", where)
    _check_extensions(section, names, values, cfg)
    return values


def _check_extensions(section: dict[str, Any], names: list[str], values: dict[str, Any], cfg: Config) -> None:
    """Each run extension's section checked by its signature (into ``values``), then the combination:
    what the extensions declare they cannot run with (one another, the engine, a trainer that
    replaces the training step) — :func:`~modforge.train.extension.refusal`."""
    from ..core.registries import EXTENSIONS

    on = []
    for name in names:
        values[name] = None if section[name] is None else check_extension(name, section[name], cfg.where)
        if values[name] is not None:
            on.append(name)
    if not on:
        return
    engine = values.get("engine") or "eager"
    trainer_class = None
    if values.get("trainer") is not None:
        trainer_class = resolve_trainer(values["trainer"], allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir))
    refused = refusal([EXTENSIONS.get(name) for name in on], names=on, trainer_class=trainer_class,
                      engine=engine if isinstance(engine, str) else engine.get("type"),
                      precision=str(section.get("precision") or "32"))  # fmt: skip
    if refused is not None:
        raise ConfigValueError(refused[0], path=refused[1], source=cfg.where(refused[1]))


def _settings_section(settings_class: type, value: Any, path: str, where: Callable[[str], str | None]) -> dict:
    """A settings section (``train.ema``…) checked by its class's signature and then by the class
    itself (its ranges and combinations): one error naming the section, either way."""
    checked = signature_of(settings_class).validate(value, path=path, origin_of=where, plain=True)
    try:
        settings_class(**checked)
    except ValueError as exc:
        raise ConfigValueError(str(exc), path=path, source=where(path)) from None
    return checked


def _check_optimizer(spec: dict[str, Any], cfg: Config) -> None:
    """Ranges of the optimizer's arguments, and its ``param_groups`` (each ``{select, args}``,
    the args checked like the optimizer's own), before anything is built."""
    where = cfg.where
    obj, sig = OPTIMIZERS.resolve(spec["type"], allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir))
    check_ranges(obj, spec["args"], path="train.optimizer.args", origin_of=where)
    groups = spec.get("param_groups")
    if groups is None:
        return
    if not isinstance(groups, list):
        raise ConfigValueError(f"expected a list of {{select, args}} groups, got {groups!r}",
                               path="train.optimizer.param_groups", source=where("train.optimizer.param_groups"))
    for i, group in enumerate(groups):
        gpath = f"train.optimizer.param_groups.{i}"
        if not isinstance(group, dict) or set(group) - {"select", "args"} or "select" not in group:
            raise ConfigValueError(f"expected {{select: [...], args: {{...}}}}, got {group!r}", path=gpath,
                                   source=where(gpath))  # fmt: skip
        select = group["select"]
        selectors = [select] if isinstance(select, str) else select
        if not isinstance(selectors, list) or not selectors or not all(isinstance(s, str) for s in selectors):
            raise ConfigValueError(f"expected a list of 'bias', 'norm' or name patterns, got {select!r}",
                                   path=f"{gpath}.select", source=where(f"{gpath}.select"))  # fmt: skip
        args = sig.validate(group.get("args") or {}, path=f"{gpath}.args", origin_of=where, plain=True)
        check_ranges(obj, args, path=f"{gpath}.args", origin_of=where)


def check_device(device: str, *, path: str, source: str | None = None) -> None:
    """Refuse a device this machine cannot train on: an unknown type (``tpu``), or CUDA/MPS
    where there is none (or a CUDA index beyond the devices present)."""
    import torch

    if device == "auto":
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda", "mps"):
        raise ConfigValueError(f"expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}", path=path,
                               source=source)  # fmt: skip
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigValueError(f"{device!r}: this machine has no CUDA device; use 'auto' or 'cpu'", path=path,
                                   source=source)  # fmt: skip
        if parsed.index is not None and parsed.index >= count:
            raise ConfigValueError(f"{device!r}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})",
                                   path=path, source=source)  # fmt: skip
    if parsed.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigValueError(f"{device!r}: MPS is not available on this machine; use 'auto' or 'cpu'", path=path,
                               source=source)  # fmt: skip


def validate_data_section(cfg: Config) -> dict[str, Any] | None:
    """Check ``data:`` (the dataset spec and the loader settings); return it normalized."""
    value = cfg.data.get("data")
    if value is None:
        return None
    where = cfg.where
    spec = DATASETS.validate(
        value, path="data", extras=DATA_KEYS, origin_of=where, allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir)
    )
    transforms = spec.pop("transforms", None)
    loader = {k: spec.pop(k) for k in LOADER_KEYS if k in spec}
    spec.update(signature_of(LoaderSettings).validate(loader, path="data", origin_of=where, plain=True))
    check_ranges(_LoaderRanges, spec, path="data", origin_of=where)
    if transforms is not None:
        check_data_transforms(spec["type"], transforms, cfg)
        spec["transforms"] = transforms
    return spec


def check_data_transforms(dataset: str, transforms: Any, cfg: Config) -> None:
    """``data.transforms`` is for datasets that take it (the image corpora), and its names and
    arguments build: errors name the key."""
    import inspect

    from ..data.images.splits import check_transforms_section

    target = DATASETS.get(dataset) if dataset in DATASETS else None  # a plug-in object path: checked at build
    if target is not None and "transforms" not in inspect.signature(target).parameters:
        raise ConfigValueError(f"dataset {dataset!r} takes no image transforms (data.transforms is for picture "
                               "datasets: mnist, cifar10, image_folder, …)", path="data.transforms",
                               source=cfg.where("data.transforms"))  # fmt: skip
    try:
        check_transforms_section(transforms)
    except ConfigError as exc:
        raise exc.located(source=cfg.where("data.transforms")) from None


class _LoaderRanges:
    """The ranges of the loader settings in ``data:`` (:class:`LoaderSettings` declares plain ints).

    Args:
        batch_size: samples per batch, 1 to ``sys.maxsize``.
        eval_batch_size: the same for evaluation (None: ``batch_size``).
        num_workers: loader processes (0: load in the training process).
        max_samples: samples per training batch (rows × crop length), 1 to ``sys.maxsize``.
        eval_max_samples: samples per length-bucketed evaluation batch (rows × longest file).
    """

    def __init__(
        self, batch_size: BatchSize = 64, eval_batch_size: Optional[BatchSize] = None, num_workers: NonNegativeInt = 0,
        max_samples: Optional[BatchSize] = None, eval_max_samples: Optional[BatchSize] = None,
    ):  # fmt: skip
        self.batch_size, self.eval_batch_size, self.num_workers = batch_size, eval_batch_size, num_workers
        self.max_samples, self.eval_max_samples = max_samples, eval_max_samples


# ----------------------------------------------------------------------------- destinations
REACTIVATE_HINT = ("pass it on the command line to use it again, e.g. train.callbacks.{index}.args.{arg}=VALUE "
                   "(or train.callbacks=[{{type: {type}, args: {{...}}}}])")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class HeldDestination:
    """A destination a stored config named that was not re-activated.

    Attributes:
        index: the callback's position in ``train.callbacks``.
        type: the callback's registered name (``mlflow``).
        arg: the argument naming the destination (``tracking_uri``).
        value: what the stored config said.
        instead: what is used instead (``a file store in RUN/mlruns``).
    """

    index: int
    type: str
    arg: str
    value: Any
    instead: str

    def describe(self) -> str:
        return f"{self.type} {self.arg} {plain_text(repr(self.value))} (kept {self.instead})"


def sweep_folder_of(run_dir: Path | None) -> Path | None:
    """The sweep folder a run folder is a trial of (``SWEEP/trials/<id>`` with ``SWEEP/sweep.yaml``), else None."""
    if run_dir is None or Path(run_dir).parent.name != "trials":
        return None
    sweep = Path(run_dir).parent.parent
    return sweep if (sweep / "sweep.yaml").is_file() else None


def _sqlite_inside(url: Any, run_dir: Path | None) -> bool:
    """Whether ``url`` is ``sqlite:///FILE`` with FILE inside ``run_dir`` or, for a sweep's
    trial, inside its sweep folder (the study the sweep keeps there); links resolved."""
    if run_dir is None or not isinstance(url, str) or not url.startswith("sqlite:///"):
        return False
    target = Path(url[len("sqlite:///") :])
    roots = [Path(run_dir), *filter(None, [sweep_folder_of(run_dir)])]
    try:
        real = target.resolve()
        return target.is_absolute() and any(real.is_relative_to(root.resolve()) for root in roots)
    except (OSError, RuntimeError, ValueError):
        return False


def _wandb_may_go_online(mode: Any) -> bool:
    return mode == "online" or (mode == "auto" and os.environ.get("WANDB_MODE", "offline") not in ("offline", "disabled",
                                                                                                     "dryrun"))  # fmt: skip


def keep_destinations_local(
    specs: list[dict[str, Any]], origin_of: Callable[[str], str | None], run_dir: Path | None = None
) -> tuple[list[tuple[int, dict[str, Any]]], list[HeldDestination]]:
    """The callback specs of a *stored* config (a run being resumed) with every destination
    that the stored file — not this command line — chose kept local, inside the run folder.

    A stored config is data: it never chooses where data goes or what is connected to
    (DESIGN.md, "Destinations are not data"). Values the user typed on this command line
    (``origin_of`` says ``override ...`` or ``flag ...``) are kept; from the stored file:

    - ``mlflow``: ``tracking_uri`` dropped (the file store ``RUN/mlruns``);
    - ``wandb``: ``mode`` becomes ``offline`` (unless ``disabled``), ``entity`` dropped;
    - ``tensorboard``: a ``subdir`` that is absolute or climbs out with ``..`` becomes ``""``;
    - ``csv_logger``: such a ``filename`` becomes ``metrics.csv``;
    - ``optuna_pruning``: the callback is left out unless its ``storage`` is a SQLite file
      inside ``run_dir`` or, for a sweep's trial, its sweep folder (which the caller then
      checks like the run folder); a study elsewhere is connecting elsewhere.

    Returns:
        ``(position in train.callbacks, spec)`` of the callbacks to build (copies; the config
        itself is not changed, so a checkpoint keeps what the run was configured with) and
        what was held back, for one warning.
    """
    out: list[tuple[int, dict[str, Any]]] = []
    held: list[HeldDestination] = []
    for i, spec in enumerate(specs):
        local = _StoredCallback(i, spec, origin_of).localized(run_dir)
        held += local.held
        if local.args is not None:
            out.append((i, {**spec, "args": local.args}))
    return out, held


class _StoredCallback:
    """One callback spec of a stored config, its destinations being made local."""

    def __init__(self, index: int, spec: dict[str, Any], origin_of: Callable[[str], str | None]):
        self.index, self.kind, self.origin_of = index, str(spec.get("type")), origin_of
        self.args: dict[str, Any] | None = dict(spec.get("args") or {})
        self.held: list[HeldDestination] = []

    def stored(self, arg: str) -> bool:
        """The stored file — not this command line — set ``arg`` (to something)."""
        assert self.args is not None
        origin = self.origin_of(f"train.callbacks.{self.index}.args.{arg}")
        return self.args.get(arg) is not None and not typed_here(origin)

    def hold(self, arg: str, instead: str, value: Any) -> None:
        assert self.args is not None
        self.held.append(HeldDestination(self.index, self.kind, arg, self.args[arg], instead))
        self.args[arg] = value

    def localized(self, run_dir: Path | None) -> _StoredCallback:
        args = self.args
        assert args is not None
        if self.kind == "mlflow" and self.stored("tracking_uri"):
            self.hold("tracking_uri", "in a file store in the run folder's mlruns/", None)
        elif self.kind == "wandb":
            if self.stored("entity"):
                self.hold("entity", "offline in the run folder's wandb/", None)
            args.setdefault("mode", "auto")  # the default, auto, would follow WANDB_MODE online
            if self.stored("mode") and args["mode"] not in ("offline", "disabled"):
                if _wandb_may_go_online(args["mode"]):
                    self.hold("mode", "offline in the run folder's wandb/", "offline")
                else:
                    args["mode"] = "offline"  # 'auto', offline today: the same, and never up to a later setting
        elif self.kind == "tensorboard" and self.stored("subdir") and not (args["subdir"] == "" or is_relative_name(args["subdir"])):
            self.hold("subdir", "in the run folder", "")
        elif self.kind == "csv_logger" and self.stored("filename") and not is_relative_name(args["filename"]):
            self.hold("filename", "as metrics.csv in the run folder", "metrics.csv")
        elif self.kind == "optuna_pruning" and self.stored("storage") and not _sqlite_inside(args["storage"], run_dir):
            self.held.append(HeldDestination(self.index, self.kind, "storage", args["storage"],
                                             "out: the callback is left out"))  # fmt: skip
            self.args = None
        return self


def held_destinations_message(held: list[HeldDestination], what: str) -> str:
    """One warning line: what ``what`` (the stored config) named that was not re-activated,
    and how to re-activate it."""
    first = held[0]
    hint = REACTIVATE_HINT.format(index=first.index, arg=first.arg, type=first.type)
    return (f"{what} names destinations that were not re-activated (a stored config never chooses where data goes "
            f"or what is connected to): {'; '.join(h.describe() for h in held)} — {hint}")  # fmt: skip
