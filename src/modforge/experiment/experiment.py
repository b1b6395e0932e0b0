"""An experiment: everything one config builds before training — data, model, metrics, task, run
extensions — and the trainer, callbacks and loaders assembled from them.

:mod:`.runner` runs an experiment (build → fit → test → write); :mod:`.trained` rebuilds one from a
checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from ..core.config import Config, display_path
from ..core.errors import ConfigError
from ..core.plugins import load_config_plugins
from ..core.references import stored_data_downloads
from ..core.registries import CALLBACKS, DATASETS, METRICS
from ..core.safe_files import check_folder
from ..core.threads import choose_threads
from ..data.base import DataSplits
from ..data.loader import LoaderSettings, make_loader
from ..data.placement import resolve_data_device
from ..engines import build_engine
from ..model import build_model
from ..tasks.base import Task, get_task, sectioned_tasks
from ..train import distributed
from ..train.evaluation_only import EvaluationOnly
from ..train.extension import RunContext, RunExtension, build_extensions
from ..train.metrics import MeanLoss, Metric, is_loss_term
from ..train.optim_builder import build_optimizer, build_scheduler, plan_schedule
from ..train.rng import seed_everything
from ..train.trainer import Trainer
from .settings import (
    LOADER_KEYS,
    RunSettings,
    TrainSettings,
    held_destinations_message,
    keep_destinations_local,
    sweep_folder_of,
)

__all__ = ["Experiment", "build_splits", "configured_task", "require_a_loss"]

log = logging.getLogger("modforge.experiment")


def _check_soft_targets(cfg: Config, splits: DataSplits, model: Any) -> None:
    """Mixed training batches (MixUp/CutMix) carry class probabilities as labels: every loss
    reading the labels must take them (``soft_targets = True``, e.g. ``cross_entropy``)."""
    if getattr(splits.train, "mixing", None) is None:
        return
    for info in getattr(model, "loss_info", []):
        fn = model.loss_fns[info.key]
        if info.target_key == "label" and not getattr(fn, "soft_targets", False):
            raise ConfigError(f"loss {info.type!r} takes class indices, but data.transforms.mix makes the training "
                              "labels class probabilities; use cross_entropy (or leave mix out)",
                              path="data.transforms.mix", source=cfg.where("data.transforms.mix"))  # fmt: skip


def build_splits(cfg: Config, seed: int) -> DataSplits:
    """The dataset ``data:`` names, built with the config's seed and its ``data.transforms``
    (handed to datasets that take them; for others, validation has refused them)."""
    data = {k: v for k, v in (cfg.data.get("data") or {}).items() if k not in LOADER_KEYS}
    context: dict[str, Any] = {"seed": seed}
    transforms = data.pop("transforms", None)
    if transforms is not None:
        context["transforms"] = transforms
    with stored_data_downloads(cfg.stored, cfg.where("data.args.download")):  # a stored config fetches nothing
        return DATASETS.build(
            data, path="data", origin_of=cfg.where, allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir), **context
        )
_DEFAULT_CALLBACKS = ("csv_logger", "progress", "checkpoint", "nan_guard")


@dataclasses.dataclass
class Experiment:
    """Everything built from one config (before training)."""

    cfg: Config
    settings: TrainSettings
    splits: DataSplits
    loader: LoaderSettings
    seed: int
    model: torch.nn.Module
    metrics: dict[str, Metric]
    task: Task
    extensions: list[RunExtension] = dataclasses.field(default_factory=list)
    _warned_destinations: bool = dataclasses.field(default=False, init=False, repr=False)

    @property
    def monitor(self) -> str:
        if self.settings.monitor:
            return self.settings.monitor
        if self.splits.val is None:
            return "train_loss"
        logged = {key for key, _ in self.metric_directions()}  # a family's figures count (coco_map → map)
        for name in self.task.monitor_preference:
            if name in logged:
                return f"val_{name}"
        return "train_loss"

    @classmethod
    def build(cls, cfg: Config, splits: DataSplits | None = None, *, init_weights: bool = True) -> Experiment:
        """Seed, load the data (unless ``splits`` is given), build the model and metrics.

        With ``init_weights`` the model starts from ``model.init``'s weights, and ``cfg``
        then records the files read (absolute path, format and SHA-256); without, the
        caller loads a checkpoint's weights over the model (testing, resuming). A process
        torchrun launched joins its process group first, before the data is sharded (only
        ``modforge train`` runs under torchrun: the other commands refuse to)."""
        load_config_plugins(cfg.plugins, sources=cfg.plugin_sources, origin="the config's plugins:")
        run = RunSettings.read(cfg)  # the seed, the typed train: section, the loader settings: read once
        settings, seed = run.train, run.seed
        # under torchrun from Python (the CLI joined already): join before the data is sharded
        distributed.join_if_launched(settings.distributed, device=str(settings.device))
        # a pin as given (warned above the CPUs), else the machine's share
        torch.set_num_threads(choose_threads(settings.num_threads, cfg.where("train.num_threads")))
        seed_everything(seed)
        if splits is None:
            splits = build_splits(cfg, seed)
        task = _task(cfg, splits)
        model = build_model(
            cfg,
            in_dim=splits.in_dim,
            num_classes=splits.num_classes,
            layout=splits.layout,
            input_shape=splits.input_shape,
            sample_rate=splits.sample_rate,
            init_weights=init_weights,
            label_shape=_label_shape(splits),
            **task.model_options,
        )
        if model.init_records:
            _record_init(cfg, model.init_records)
        extensions = build_extensions(settings.extensions, cfg.where)
        example = torch.zeros(2, *splits.input_shape) if splits.input_shape is not None else None
        for extension in extensions:  # after model.init (QAT fine-tunes the loaded weights); a checkpoint fits after
            extension.prepare_model(model, example)
        _check_soft_targets(cfg, splits, model)
        if distributed.rank() > 0:  # same weights everywhere (DDP starts from rank 0's), own randomness
            seed_everything(seed + distributed.rank())  # dropout masks, augmentation drawn from torch's RNG
        metric_specs = settings.metrics
        if metric_specs is None:
            metric_specs = [{"type": name, "args": {}} for name in task.default_metrics]
        metrics: dict[str, Metric] = {}
        for i, spec in enumerate(metric_specs):
            name, n = spec["type"], 2
            while name in metrics:
                name, n = f"{spec['type']}_{n}", n + 1
            metrics[name] = METRICS.build(
                spec, path=f"train.metrics.{i}", origin_of=cfg.where, num_classes=splits.num_classes,
                class_names=list(splits.class_names) or None,
            )
        return cls(cfg, settings, splits, run.loader, seed, model, metrics, task, extensions)

    @property
    def trainer_class(self) -> type[Trainer]:
        """The Trainer class ``train.trainer`` names (checked at validation), else :class:`Trainer`."""
        from ..train.trainers import resolve_trainer

        return resolve_trainer(self.settings.trainer, allowed_modules=self.cfg.plugins, base_dir=str(self.cfg.base_dir),
                               source=self.cfg.where("train.trainer"))  # fmt: skip

    def metric_directions(self) -> list[tuple[str, bool]]:
        """(logged name, higher is better) of every scalar figure the metrics log."""
        out = []
        for name, metric in self.metrics.items():
            if metric.logs:
                out += [(key, metric.higher_is_better) for key in metric.logs]
            elif metric.scalar:
                out.append((name, metric.higher_is_better))
        return out

    def _a_loss_term_column(self, name: str) -> bool:
        """``train_<term>`` or ``val_<term>`` (with the ``loss`` metric) of a named loss term
        (``cls_loss``, ``loss_cross_entropy``): the model's output decides which terms exist, so
        such a monitor is checked against the first epoch's row (one clear error if absent)."""
        split, _, term = name.partition("_")
        if not is_loss_term(term):
            return False
        return split == "train" or (split == "val" and self.splits.val is not None
                                    and any(isinstance(m, MeanLoss) for m in self.metrics.values()))  # fmt: skip

    def check_monitor(self) -> None:
        """Refuse a ``train.monitor`` no epoch will ever log, before any training."""
        logged = ["train_loss"]
        if self.splits.val is not None:
            logged += [f"val_{key}" for key, _ in self.metric_directions()]
        if self.monitor not in logged and not self._a_loss_term_column(self.monitor):
            import difflib

            close = difflib.get_close_matches(self.monitor, logged, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(
                f"'{self.monitor}' is never logged{hint} (logged each epoch: {', '.join(logged)})",
                path="train.monitor",
                source=self.cfg.where("train.monitor"),
            )

    def callback_specs(self, run_dir: Path | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``train.callbacks`` as they are built, with their positions. A stored config's (a
        run being resumed) keep every destination its file named local, inside the run
        folder — only this command line re-activates one
        (:func:`~modforge.experiment.settings.keep_destinations_local`); what was held back
        is one warning, given once."""
        if not self.cfg.stored:
            return list(enumerate(self.settings.callbacks))
        specs, held = keep_destinations_local(list(self.settings.callbacks), self.cfg.where, run_dir)
        sweep = sweep_folder_of(run_dir)
        if sweep is not None and any(spec["type"] == "optuna_pruning" for _, spec in specs):
            check_folder(sweep, "sweep folder")  # its study (optuna.db) is written: no link out of it
        if held and not self._warned_destinations:
            self._warned_destinations = True
            what = f"the stored config of {display_path(run_dir)}" if run_dir is not None else "the stored config"
            log.warning(held_destinations_message(held, what))
        return specs

    def callbacks(self, run_dir: Path | None = None) -> list:
        """The default callbacks (CSV, progress, checkpoint, NaN guard) and the configured ones
        (:meth:`callback_specs`); a configured callback of a default's type replaces it."""
        settings, monitor = self.settings, self.monitor
        specs = self.callback_specs(run_dir)
        user = [  # train.monitor is only a default: a callback's own args.monitor/mode win
            CALLBACKS.build(
                spec,
                path=f"train.callbacks.{i}",
                origin_of=self.cfg.where,
                **{k: v for k, v in (("monitor", monitor), ("mode", "auto")) if k not in spec["args"]},
            )
            for i, spec in specs
        ]
        user_types = {spec["type"] for _, spec in specs}
        defaults = []
        for name in _DEFAULT_CALLBACKS:
            if name in user_types or (name == "nan_guard" and not settings.nan_guard):
                continue
            args = {"progress": {"bar": settings.progress}, "checkpoint": dict(settings.checkpoint)}.get(name, {})
            defaults.append(
                CALLBACKS.build({"type": name, "args": args}, path=f"train.{name}", monitor=monitor, mode="auto")
            )
        return defaults + user

    def trainer(self, train_loader, run_dir: Path | None, *, trainer_class: type = Trainer,
                resume: dict[str, Any] | None = None, **extra: Any) -> Trainer:  # fmt: skip
        """The configured trainer (``trainer_class`` with ``extra`` arguments: a ContinualTrainer
        and its algorithm), its run extensions set up. ``resume``: the checkpoint the run continues
        from (a distilled run's teacher is checked against the one it recorded before it is built)."""
        settings = self.settings
        optimizer = build_optimizer(settings.optimizer, self.model, origin_of=self.cfg.where)
        scheduler_spec = settings.scheduler or {}
        plan = plan_schedule(settings.scheduler, epochs=settings.max_epochs, max_steps=settings.max_steps,
                             steps_per_epoch=-(-len(train_loader) // settings.accumulate))  # fmt: skip
        interval = plan.interval
        scheduler = build_scheduler(settings.scheduler, optimizer, plan=plan, origin_of=self.cfg.where)
        self.check_monitor()
        try:
            trainer = self._trainer(optimizer, scheduler, interval, scheduler_spec, run_dir, trainer_class, extra,
                                    RunContext(self.cfg, self.splits, train_loader, resume))  # fmt: skip
        except ValueError as exc:
            raise ConfigError(str(exc), path="train", source=self.cfg.where("train")) from None
        self._check_data_device(trainer.device)
        return trainer

    def _check_data_device(self, model_device: torch.device) -> None:
        """``data.device`` must be where the model trains: batches cut on one device cannot feed
        a model on another (torch would only say "tensors on different devices" mid-step)."""
        if self.loader.device is None:
            return
        held = resolve_data_device(self.loader.device)
        if held.type != model_device.type or (held.index or 0) != (model_device.index or 0):
            raise ConfigError(f"the training batches are made on {held} (data.device: {self.loader.device}) but the "
                              f"model trains on {model_device} (train.device: {self.settings.device}); set both to "
                              "the same device, or leave data.device out", path="data.device",
                              source=self.cfg.where("data.device"))  # fmt: skip

    def _trainer(self, optimizer, scheduler, interval, scheduler_spec, run_dir, cls, extra,
                 context: RunContext) -> Trainer:  # fmt: skip
        settings = self.settings
        return cls(
            self.model,
            optimizer,
            scheduler=scheduler,
            scheduler_interval=interval,
            scheduler_monitor=scheduler_spec.get("monitor"),
            metrics=self.metrics,
            directions=dict(self.metric_directions()),
            callbacks=self.callbacks(run_dir),
            max_epochs=settings.max_epochs,
            max_steps=settings.max_steps,
            grad_clip=settings.grad_clip,
            accumulate=settings.accumulate,
            precision=settings.precision,
            device=settings.device,
            log_every=settings.log_every,
            run_dir=run_dir,
            config=self.cfg.to_dict(),
            name=self.cfg.name,
            async_checkpoints=settings.async_checkpoints,
            engine=build_engine(settings.engine, origin_of=self.cfg.where),
            find_unused_parameters=settings.distributed.find_unused_parameters,
            extensions=self.extensions,
            context=context,
            **extra,
        )

    def evaluator(self) -> Trainer:
        """A trainer of the run's own class for evaluating ``self.model`` as the run's final test
        did: its precision (bf16 autocast…) and, for an engine that needs no example batch, its
        runnable (``eager`` with ``memory_format: channels_last``), so ``modforge test`` of a
        checkpoint reports the figures the run's own test reported."""
        settings = self.settings
        trainer = self.trainer_class(
            self.model,
            EvaluationOnly(self.model.parameters()),  # no torch optimizer: building one imports torch._dynamo
            metrics=self.metrics,
            precision=settings.precision,
            device=settings.device,
            engine=build_engine(settings.engine, origin_of=self.cfg.where),
        )
        if not trainer.engine.capabilities.needs_example_input:
            trainer.runnable = trainer.engine.prepare(trainer.model, None, train=False)
        return trainer

    def loaders(self):
        """Train, val and test loaders; with several processes, this process's shards
        (``data.batch_size`` is per process)."""
        generator = torch.Generator().manual_seed(self.seed)
        shard = {"num_replicas": distributed.world_size(), "rank": distributed.rank()}
        train = make_loader(self.splits.train, self.loader, train=True, generator=generator, **shard,
                            finish_on=self.finish_device())  # fmt: skip
        shard["mask_aware"] = self.scores_padded_batches
        val = make_loader(self.splits.val, self.loader, train=False, **shard) if self.splits.val is not None else None
        test = make_loader(self.splits.test, self.loader, train=False, **shard) if self.splits.test is not None else None
        return train, val, test

    def finish_device(self) -> torch.device | None:
        """Where a training loader's pictures held in host memory may leave the workers as uint8 and
        be normalised after their copy (``make_loader``'s ``finish_on``): the CUDA device training
        runs on, with ``data.pin_memory`` on; None otherwise. Every training loader of a run asks
        here (a continual run's, one a task)."""
        return self._training_gpu() if self.loader.pin_memory else None

    def _training_gpu(self) -> torch.device | None:
        """The CUDA device ``train.device`` trains on (``auto`` and ``cuda`` as ``data.device``
        resolves them), or None: where training pictures may be normalised after their copy."""
        if not torch.cuda.is_available():
            return None
        try:
            device = resolve_data_device(str(self.settings.device))
        except ConfigError:
            return None
        return device if device.type == "cuda" else None

    def scores_padded_batches(self) -> bool:
        """Whether padded batches of whole files score as the files alone: a mask-aware model
        run by an engine that keeps its parts (eager, compile) — what length-bucketed
        evaluation (``data.eval_max_samples``) needs."""
        spec = self.settings.engine
        name = spec if isinstance(spec, str) else (spec or {}).get("type", "eager") if isinstance(spec, dict) else ""
        return bool(getattr(self.model, "mask_aware", False)) and name in ("eager", "compile")


def _record_init(cfg: Config, records: list[dict[str, Any]]) -> None:
    """Write into ``cfg`` which files ``model.init`` read: absolute path, format, SHA-256 (the
    run's ``config.yaml`` then says exactly where its starting weights came from, and pins them)."""
    original = cfg.data["model"]["init"]
    entries = original if isinstance(original, list) else [original]
    resolved = []
    for entry, record in zip(entries, records, strict=True):
        entry = dict(entry) if isinstance(entry, dict) else {"path": entry}
        if entry.get("format", "auto") == "auto":
            entry["format"] = record["format"]
        resolved.append({**entry, "path": record["path"], "sha256": record["sha256"]})
    cfg.data["model"]["init"] = resolved if isinstance(original, list) else resolved[0]


def _label_shape(splits: DataSplits) -> tuple[int, ...]:
    """One training sample's label shape (``()`` for a class index; a mask's ``(H, W)``), when
    the split keeps its labels as one tensor; else ``()``."""
    labels = getattr(splits.train, "labels", None)
    return tuple(labels.shape[1:]) if isinstance(labels, torch.Tensor) and labels.ndim > 1 else ()


def configured_task(cfg: Config) -> Task | None:
    """The task a config chooses before any data is loaded: its ``task:``, else the task whose
    own section it has (``continual:``); None: the dataset decides (:func:`_task`).

    Raises:
        ConfigError: an unknown ``task:``.
    """
    name = cfg.data.get("task")
    if name is None:
        owner = next((cls for section, cls in sectioned_tasks().items() if cfg.data.get(section) is not None), None)
        return owner() if owner is not None else None
    try:
        return get_task(name)
    except ValueError as exc:
        raise ConfigError(str(exc), path="task", source=cfg.where("task")) from None


def _task(cfg: Config, splits: DataSplits) -> Task:
    """The config's task (:func:`configured_task`), else the dataset's."""
    task = configured_task(cfg)
    if task is not None:
        return task
    try:
        return get_task(splits.task)
    except ValueError as exc:
        raise ConfigError(str(exc), path="data.type", source=cfg.where("data.type")) from None


def require_a_loss(exp: Experiment) -> None:
    """Refuse, before anything is written, a model that cannot produce a training loss: no
    ``model.losses`` and no ``dict_io`` stage that could write a loss key."""
    if not getattr(exp.model, "makes_loss", True):
        raise ConfigError("the model has no loss and no stage that writes a loss key: there is nothing to train "
                          "on; add one, e.g. losses: [cross_entropy]", path="model.losses",
                          source=exp.cfg.where("model"))  # fmt: skip
